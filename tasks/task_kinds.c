/*
 * tasks/task_kinds.c: the tables generated from the ZT_TASK_KINDS X-macro (zt_task_kinds.h):
 * each kind's name, class and phase, and the class and phase names.
 *
 * Layer: tasks/, the bottom of it: plain data, no StarPU. The dispatcher, the registry, the
 * builder and the trace tools read kinds' names and columns from here.
 */
#include <string.h>          /* strcmp */
#include "zt_task_kinds.h"   /* our prototypes, ZT_TASK_KINDS */

static const char *const g_names[ZT_KIND_COUNT] = {
#define ZT_KIND_NAME_(k, cls, phase) #k,
    ZT_TASK_KINDS(ZT_KIND_NAME_)
#undef ZT_KIND_NAME_
};
static const enum zt_task_class g_class[ZT_KIND_COUNT] = {
#define ZT_KIND_CLASS_(k, cls, phase) ZT_TASK_CLASS_##cls,
    ZT_TASK_KINDS(ZT_KIND_CLASS_)
#undef ZT_KIND_CLASS_
};
static const enum zt_task_phase g_phase[ZT_KIND_COUNT] = {
#define ZT_KIND_PHASE_(k, cls, phase) ZT_TASK_PHASE_##phase,
    ZT_TASK_KINDS(ZT_KIND_PHASE_)
#undef ZT_KIND_PHASE_
};
static const char *const g_class_names[] = {"compute", "communication", "swap", "checkpoint",
                                            "data"};
static const char *const g_phase_names[] = {"none", "forward", "backward", "weight_grad",
                                            "optimizer"};
_Static_assert(sizeof g_class_names / sizeof g_class_names[0] == ZT_TASK_CLASS_COUNT,
               "one name per task class");
_Static_assert(sizeof g_phase_names / sizeof g_phase_names[0] == ZT_TASK_PHASE_COUNT,
               "one name per task phase");

const char *zt_task_kind_name(int kind) {
    return (kind >= 0 && kind < ZT_KIND_COUNT) ? g_names[kind] : "?";
}

const char *const *zt_task_kind_names(void) { return g_names; }

int zt_task_kind_find(const char *name) {
    for (int k = 0; k < ZT_KIND_COUNT; k++)
        if (!strcmp(g_names[k], name)) return k;
    return -1;
}

enum zt_task_class zt_task_kind_class(int kind) {
    return (kind >= 0 && kind < ZT_KIND_COUNT) ? g_class[kind] : ZT_TASK_CLASS_COMPUTE;
}

enum zt_task_phase zt_task_kind_phase(int kind) {
    return (kind >= 0 && kind < ZT_KIND_COUNT) ? g_phase[kind] : ZT_TASK_PHASE_NONE;
}

const char *zt_task_class_name(enum zt_task_class cls) {
    return ((int)cls >= 0 && cls < ZT_TASK_CLASS_COUNT) ? g_class_names[cls] : "?";
}

const char *zt_task_phase_name(enum zt_task_phase phase) {
    return ((int)phase >= 0 && phase < ZT_TASK_PHASE_COUNT) ? g_phase_names[phase] : "?";
}
