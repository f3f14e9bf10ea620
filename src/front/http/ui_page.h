/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ui_page.h: the status page, built into the daemon from
 * src/front/http/ui/ by its embed.sh (ui_page.c is generated): one HTML
 * document with its style and script inline, and the Content-Security-
 * Policy that allows exactly those two blocks; and its icon.
 *
 * Owns nothing at run time: constants.
 */
#ifndef RATELIMITD_UI_PAGE_H
#define RATELIMITD_UI_PAGE_H

#include <stddef.h>

extern const char ui_page_html[];
extern const size_t ui_page_len;
extern const char ui_page_csp[];
extern const char ui_icon_svg[];

#endif
