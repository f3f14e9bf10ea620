/* SPDX-License-Identifier: Apache-2.0 */
/*
 * envoy_config.h: the directory of envoyproxy/ratelimit's YAML files
 * (`envoy_config:` or --envoy-config DIR): which files in it are domains,
 * in which order, and reading them. What a file means is config_domains.c's (one
 * parser for these files and the policy file's `domains:`).
 */
#ifndef RATELIMITD_ENVOY_CONFIG_H
#define RATELIMITD_ENVOY_CONFIG_H

#include <stddef.h>

#include "lib/util.h"

#define ENVOY_CONFIG_FILE_MAX (16 * 1024 * 1024) /* bytes of one file */
#define ENVOY_CONFIG_FILES_MAX 10000             /* files in the directory */

/*
 * Calls fn(path, text, len, arg) for every regular file (symlinks followed,
 * as a Kubernetes ConfigMap mounts them) named *.yaml or *.yml directly in
 * dir, in strcmp order of the names; names starting with '.' are skipped
 * (a ConfigMap's ..data and editors' swap files). path is "dir/name"; text
 * is NUL-terminated and valid only during the call. Stops at the first fn
 * that returns -1 and returns -1 (fn wrote err). Returns -1 with
 * "<dir>: message" in err when the directory or a file cannot be read, 0
 * when every file was handed to fn (none at all is fine: no domains).
 */
int envoy_config_each(const char *dir,
                      int (*fn)(const char *path, const char *text, size_t len, void *arg),
                      void *arg, char *err, size_t errlen) RL_WUR;

#endif
