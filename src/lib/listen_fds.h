/* SPDX-License-Identifier: Apache-2.0 */
/*
 * listen_fds.h: the process's listening sockets by the policy file's field
 * that names them (listen, admin_listen, grpc_listen): those it was given
 * at start (systemd's socket activation, or an old ratelimitd's USR2
 * hand-over: LISTEN_FDS, LISTEN_PID, LISTEN_FDNAMES, as sd_listen_fds(3)
 * says), and those it bound itself, so that a hand-over can pass them all
 * on. A passed socket is matched to a field by its name
 * (FileDescriptorName=) or else by its address; one matched to no field,
 * or a field set but not passed while others were, is an error naming it.
 *
 * Owns the descriptors it records (its own copies); not the listeners'
 * (listener.c takes copies), not what an address is (listen.c).
 */
#ifndef RATELIMITD_LISTEN_FDS_H
#define RATELIMITD_LISTEN_FDS_H

#include <stddef.h>

#include "lib/util.h"

struct listen_fds;

/* The most sockets a process takes or records. */
#define LISTEN_FDS_MAX 256

/* A field of the policy file that listens, and its address (NULL: unset). */
struct listen_field {
    const char *name;
    const char *addr;
};

struct listen_fds *listen_fds_new(void);
void listen_fds_free(struct listen_fds *s); /* NULL is a no-op; closes every copy */

/*
 * Takes the sockets passed in the environment, if any and if LISTEN_PID is
 * this process (else they are another's: ignored), and removes the
 * variables so that nothing this process starts sees them. Each is made
 * non-blocking and close-on-exec, and matched to one of fields[0..n). A
 * socket that is no listening stream socket, or matched to no field, or a
 * field set and not passed (when any socket was): -1 with a message naming
 * it. exact (a hand-over's sockets): one matched by name must be at the
 * field's address too (systemd's socket unit, not the policy file, says
 * where its sockets are; an old process's policy file may say otherwise
 * than the new one's). Returns the number of sockets taken (0: none passed).
 */
int listen_fds_inherit(struct listen_fds *s, const struct listen_field *fields, size_t n, int exact,
                       char *err, size_t errlen) RL_WUR;

/*
 * A listening socket for field from those passed, or -1 if none was (the
 * caller binds its own). Each call takes the next of the field's sockets
 * (one a worker, when an old process passed one per worker), then starts
 * over: workers beyond them share. Returns a copy the caller owns, or -2
 * with a message; *own_file: a unix socket's file is this process's to
 * remove at the end (passed by a hand-over, whose old process leaves it),
 * not systemd's.
 */
int listen_fds_take(struct listen_fds *s, const char *field, int *own_file, char *err,
                    size_t errlen) RL_WUR;

/* Records a copy of fd, a socket this process bound for field, to pass on
 * in a hand-over. Returns -1 with a message if it cannot be copied. */
int listen_fds_add(struct listen_fds *s, const char *field, int fd, char *err,
                   size_t errlen) RL_WUR;

/* The sockets recorded, for a hand-over: their count, each one's
 * descriptor and field. */
size_t listen_fds_count(const struct listen_fds *s);
int listen_fds_fd(const struct listen_fds *s, size_t i);
const char *listen_fds_field(const struct listen_fds *s, size_t i);

/* True once this process hands its sockets over (listen_fds_handed_over):
 * a unix socket's file is then the next process's, not to be removed. */
int listen_fds_is_handed_over(const struct listen_fds *s);
/* The sockets now belong to the next process: the copies here close. */
void listen_fds_handed_over(struct listen_fds *s);

#endif
