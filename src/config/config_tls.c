/* SPDX-License-Identifier: Apache-2.0 */
/*
 * config_tls.c: the tls, admin_tls and grpc_tls blocks once their fields
 * are read (config_fields.c has the rows): the rules between a block's
 * fields and its listener, then the block's TLS context made from its
 * files (lib/tls_server.c). Making the context at load is what lets -t
 * and a reload check the certificate, the key and the client CA as the
 * daemon will use them: a reload whose new files are broken fails as a
 * whole, at the block's line, and the running snapshot keeps its
 * contexts.
 *
 * Owns these rules and the contexts' life in a snapshot; not the rows,
 * not OpenSSL (tls_server.c), not the connections (front/tls.c).
 */
#include "config/config.h"
#include "config/config_internal.h"

#include <stdio.h>
#include <stdlib.h>

/* The block of each listener, by enum tls_listener, and its listener's
 * field. */
static const char *const block_names[TLS_NLISTENERS] = {
    [TLS_LISTEN] = "tls",
    [TLS_ADMIN_LISTEN] = "admin_tls",
    [TLS_GRPC_LISTEN] = "grpc_tls",
};

static const char *listener_address(const struct config *c, enum tls_listener i)
{
    return i == TLS_LISTEN ? c->listen : i == TLS_ADMIN_LISTEN ? c->admin_listen : c->grpc_listen;
}

/* One block: its rules, then its context. */
static int load_block(struct loader *ld, const yaml_node_t *block, struct config *c,
                      enum tls_listener i)
{
    struct listen_tls_config *t = &c->listen_tls[i];
    const char *name = block_names[i];
    char path[PATH_LEN], msg[RL_ERRLEN * 2];

    if (listener_address(c, i) == NULL)
        return cfg_fail(ld, block, name, "applies only with %s, which is not set",
                        tls_listener_names[i]);
    if (t->client_auth != TLS_CLIENT_AUTH_NONE && t->client_ca_file == NULL) {
        snprintf(path, sizeof path, "%s.client_auth", name);
        return cfg_fail(ld, cfg_field_node(ld, block, "client_auth"), path,
                        "%s needs client_ca_file (the CAs a client certificate is verified "
                        "against)",
                        cfg_client_auth_names[t->client_auth]);
    }
    if (t->client_auth == TLS_CLIENT_AUTH_NONE && t->client_ca_file != NULL) {
        snprintf(path, sizeof path, "%s.client_ca_file", name);
        return cfg_fail(ld, cfg_field_node(ld, block, "client_ca_file"), path,
                        "does nothing with client_auth: none: set client_auth: request or "
                        "require");
    }
    struct tls_server_params p = {
        .cert_file = t->cert_file,
        .key_file = t->key_file,
        .client_ca_file = t->client_ca_file,
        .client_auth = (enum tls_client_auth)t->client_auth,
        .alpn = i == TLS_GRPC_LISTEN ? "h2" : "http/1.1",
    };
    if ((t->server = tls_server_new(&p, msg, sizeof msg)) == NULL)
        return cfg_fail(ld, block, name, "%s", msg);
    return 0;
}

int cfg_load_listen_tls(struct loader *ld, const yaml_node_t *root, struct config *c)
{
    for (int i = 0; i < TLS_NLISTENERS; i++) {
        const yaml_node_t *block = cfg_field_node(ld, root, block_names[i]);
        if (block != NULL && load_block(ld, block, c, (enum tls_listener)i) < 0)
            return -1;
    }
    return 0;
}

void cfg_free_listen_tls(struct config *c)
{
    for (int i = 0; i < TLS_NLISTENERS; i++) {
        struct listen_tls_config *t = &c->listen_tls[i];
        free(t->cert_file);
        free(t->key_file);
        free(t->client_ca_file);
        tls_server_free(t->server);
    }
}
