/* SPDX-License-Identifier: Apache-2.0 */
/*
 * notify.h: telling systemd what the daemon is doing (sd_notify): READY=1
 * once policies are loaded, the socket listens and the script is loaded in
 * Redis; STATUS= lines; RELOADING=1/READY=1 around a reload; STOPPING=1;
 * WATCHDOG=1 at half the WatchdogSec= interval. Built without libsystemd
 * (./configure --without-systemd), every call does nothing.
 */
#ifndef RATELIMITD_NOTIFY_H
#define RATELIMITD_NOTIFY_H

struct event_base;
struct notify;
struct server;

/* Starts the watchdog timer if systemd asked for one. Never fails: without
 * a NOTIFY_SOCKET there is nobody to tell. */
struct notify *notify_new(struct event_base *base);
void notify_free(struct notify *n); /* NULL is a no-op */

/* Sends STATUS= with the number of policies and whether Redis is ready,
 * preceded by READY=1 the first time Redis is ready (and after a reload). */
void notify_state(struct notify *n, const struct server *srv);
void notify_reloading(struct notify *n);
void notify_stopping(struct notify *n);
/* A USR2 hand-over, from the old process (still the main PID, so the
 * unit's NotifyAccess=main is enough): MAINPID= the new one, waiting (a
 * bounded time) until systemd has read it, so that the old process's exit
 * that follows does not end the unit. */
void notify_mainpid(struct notify *n, long pid);

#endif
