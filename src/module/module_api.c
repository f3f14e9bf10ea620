/* SPDX-License-Identifier: Apache-2.0 */
/*
 * module_api.c: resolves the Modules API functions of redismodule_api.h by
 * name, as redismodule.h's RedisModule_Init does. See redismodule_api.h.
 *
 * Owns: the lookup. Does not own: the commands (module.c).
 */
#include <string.h>

#include "module/redismodule_api.h"

typedef int (*get_api_fn)(const char *name, void *out);

/* One row per function: its exported name and where its pointer goes. */
struct api_row {
    const char *name;
    size_t offset;
};

#define ROW(f)                                                                                     \
    {                                                                                              \
        "RedisModule_" #f, offsetof(struct redis_module_api, f)                                    \
    }

static const struct api_row rows[] = {
    ROW(SetModuleAttribs),
    ROW(CreateCommand),
    ROW(IsKeysPositionRequest),
    ROW(KeyAtPos),
    ROW(WrongArity),
    ROW(StringPtrLen),
    ROW(Call),
    ROW(CallReplyType),
    ROW(CallReplyStringPtr),
    ROW(CallReplyLength),
    ROW(CallReplyArrayElement),
    ROW(CallReplyInteger),
    ROW(CreateString),
    ROW(FreeString),
    ROW(FreeCallReply),
    ROW(ReplyWithArray),
    ROW(ReplyWithLongLong),
    ROW(ReplyWithError),
    ROW(OpenKey),
    ROW(CloseKey),
    ROW(KeyType),
    ROW(StringDMA),
    ROW(StringTruncate),
    ROW(SetAbsExpire),
    ROW(Milliseconds),
    ROW(Replicate),
    ROW(NotifyKeyspaceEvent),
    ROW(Alloc),
    ROW(Free),
};

int module_api_init(struct redis_module_api *api, RedisModuleCtx *ctx, const char *name, int ver)
{
    /* Redis puts RedisModule_GetApi in the context's first field: the one
     * function a module cannot look up. A data pointer to a function
     * pointer goes through memcpy, which ISO C allows. */
    void *first;
    get_api_fn get_api;
    memcpy(&first, ctx, sizeof first);
    memcpy(&get_api, &first, sizeof get_api);
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        if (get_api(rows[i].name, (char *)api + rows[i].offset) != REDISMODULE_OK)
            return REDISMODULE_ERR;
    api->SetModuleAttribs(ctx, name, ver, REDISMODULE_APIVER_1);
    return REDISMODULE_OK;
}
