/* SPDX-License-Identifier: Apache-2.0 */
/*
 * redismodule_api.h: the part of the Redis Modules API the module uses,
 * declared here because no Debian package ships redismodule.h. Each
 * function is a pointer that module_api_init resolves by name through
 * RedisModule_GetApi, the function Redis hands a module as the first field
 * of the context it passes to RedisModule_OnLoad (as redismodule.h's
 * RedisModule_Init does). Names, signatures and constants are those of the
 * Modules API reference (Redis 7.0).
 *
 * Owns: those declarations and their resolution, into one struct (module.c
 * keeps it, written once at load: Redis calls a command with its context
 * alone, so the table cannot be handed to it).
 * Does not own: any command (module.c).
 */
#ifndef RATELIMITD_REDISMODULE_API_H
#define RATELIMITD_REDISMODULE_API_H

#include <stddef.h>

#define REDISMODULE_OK 0
#define REDISMODULE_ERR 1
#define REDISMODULE_APIVER_1 1

#define REDISMODULE_REPLY_STRING 0
#define REDISMODULE_REPLY_ERROR 1
#define REDISMODULE_REPLY_INTEGER 2
#define REDISMODULE_REPLY_ARRAY 3

#define REDISMODULE_READ (1 << 0)
#define REDISMODULE_WRITE (1 << 1)

#define REDISMODULE_KEYTYPE_EMPTY 0
#define REDISMODULE_KEYTYPE_STRING 1

#define REDISMODULE_NOTIFY_GENERIC (1 << 2)
#define REDISMODULE_NOTIFY_STRING (1 << 3)

typedef struct RedisModuleCtx RedisModuleCtx;
typedef struct RedisModuleString RedisModuleString;
typedef struct RedisModuleCallReply RedisModuleCallReply;
typedef struct RedisModuleKey RedisModuleKey;
typedef int (*RedisModuleCmdFunc)(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);

/* The functions, as Redis exports them by name. */
struct redis_module_api {
    void (*SetModuleAttribs)(RedisModuleCtx *ctx, const char *name, int ver, int apiver);
    int (*CreateCommand)(RedisModuleCtx *ctx, const char *name, RedisModuleCmdFunc cmdfunc,
                         const char *strflags, int firstkey, int lastkey, int keystep);
    int (*IsKeysPositionRequest)(RedisModuleCtx *ctx);
    void (*KeyAtPos)(RedisModuleCtx *ctx, int pos);
    int (*WrongArity)(RedisModuleCtx *ctx);
    const char *(*StringPtrLen)(const RedisModuleString *str, size_t *len);
    RedisModuleCallReply *(*Call)(RedisModuleCtx *ctx, const char *cmdname, const char *fmt, ...);
    int (*CallReplyType)(RedisModuleCallReply *reply);
    const char *(*CallReplyStringPtr)(RedisModuleCallReply *reply, size_t *len);
    size_t (*CallReplyLength)(RedisModuleCallReply *reply);
    RedisModuleCallReply *(*CallReplyArrayElement)(RedisModuleCallReply *reply, size_t idx);
    long long (*CallReplyInteger)(RedisModuleCallReply *reply);
    RedisModuleString *(*CreateString)(RedisModuleCtx *ctx, const char *ptr, size_t len);
    void (*FreeString)(RedisModuleCtx *ctx, RedisModuleString *str);
    void (*FreeCallReply)(RedisModuleCallReply *reply);
    int (*ReplyWithArray)(RedisModuleCtx *ctx, long len);
    int (*ReplyWithLongLong)(RedisModuleCtx *ctx, long long ll);
    int (*ReplyWithError)(RedisModuleCtx *ctx, const char *err);
    RedisModuleKey *(*OpenKey)(RedisModuleCtx *ctx, RedisModuleString *keyname, int mode);
    void (*CloseKey)(RedisModuleKey *key);
    int (*KeyType)(RedisModuleKey *key);
    char *(*StringDMA)(RedisModuleKey *key, size_t *len, int mode);
    int (*StringTruncate)(RedisModuleKey *key, size_t newlen);
    int (*SetAbsExpire)(RedisModuleKey *key, long long expire);
    long long (*Milliseconds)(void);
    int (*Replicate)(RedisModuleCtx *ctx, const char *cmdname, const char *fmt, ...);
    int (*NotifyKeyspaceEvent)(RedisModuleCtx *ctx, int type, const char *event,
                               RedisModuleString *key);
    void *(*Alloc)(size_t bytes);
    void (*Free)(void *ptr);
};

/* Resolves every function of api from the context RedisModule_OnLoad was
 * given, and names the module (RedisModule_Init's work). Returns
 * REDISMODULE_OK, or REDISMODULE_ERR if this Redis lacks one. */
int module_api_init(struct redis_module_api *api, RedisModuleCtx *ctx, const char *name, int ver);

#endif
