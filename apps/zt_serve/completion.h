/*
 * apps/zt_serve/completion.h: a /v1/completions request in flight: its prompts submitted to
 * the generator, the tokens the generator's thread hands back, and what the HTTP side makes of
 * them (one JSON body, or Server-Sent Events as the text grows).
 *
 * Layer: apps/ (zt-serve). A completion is shared by the connection's thread and the
 * generator's thread (a reference each, plus one per running prompt); its lock guards all of
 * it. When the client goes away the completion is marked cancelled: each of its prompts stops
 * at its next token, which frees its KV-cache slot at the next step.
 */
#ifndef ZT_SERVE_COMPLETION_H
#define ZT_SERVE_COMPLETION_H

#include <stddef.h>   /* size_t */
#include <sys/types.h> /* ssize_t */
#include "api.h"      /* struct api_completion, struct api_error */

struct completion;

/* the 429 error of a server at capacity, naming the limit that refuses */
void completion_at_capacity(struct serve *s, struct api_error *err);
/* the parsed request's prompts admitted and submitted (req is taken over: its arrays move into
 * the completion): a completion holding a reference for the caller, or NULL with *err */
struct completion *completion_start(struct serve *s, struct api_completion *req,
                                    struct api_error *err);
/* wait until every prompt has ended (cancelling them when the client leaves meanwhile): 200
 * and the OpenAI response body in *json (malloc'd; NULL: out of memory), 500 and an error body
 * when the generator failed, or 0 (no body) when the client has gone */
int completion_wait_json(struct completion *c, char **json);
int completion_streams(const struct completion *c);
/* the client's socket: while waiting for tokens, its hang-up is looked for every 100 ms (and
 * the completion cancelled), so that a client that left frees its slots at once */
void completion_watch(struct completion *c, int fd);
/* libmicrohttpd's content reader for a streaming completion: the next bytes of its event
 * stream (blocks until there are some; -1 at its end: MHD_CONTENT_READER_END_OF_STREAM) */
ssize_t completion_read(void *c, uint64_t pos, char *buf, size_t max);
/* the caller's reference dropped; before its prompts ended, they are cancelled */
void completion_release(void *c);

#endif /* ZT_SERVE_COMPLETION_H */
