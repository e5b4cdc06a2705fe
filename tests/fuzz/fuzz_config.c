/*
 * tests/fuzz/fuzz_config.c: the JSON readers of io/config.c and io/model_shape.c on any text:
 * the DeepSpeed config (resolved for one and for three ranks) and the model shape file.
 */
#include "fuzz_util.h"
#include "zt_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *json = fuzz_input_text(data, size);
    struct zt_config cfg;
    for (int world = 1; world <= 3; world += 2)
        fuzz_check_error(zt_config_parse(&cfg, json, "fuzz.json", world), "zt_config_parse");
    struct zt_model_shape m;
    fuzz_check_error(zt_model_shape_parse(&m, json, "fuzz.json"), "zt_model_shape_parse");
    free(json);
    return 0;
}
