/*
 * answer.c: INTERIM adapter from response.c's rendered HTTP responses to
 * the evhttp front's struct answer (answer.h).
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "answer.h"
#include "buf.h"
#include "response.h"
#include "util.h"

void answer_add_header(struct answer *ans, const char *name, const char *value)
{
    if (ans->nheaders >= ANSWER_MAX_HEADERS)
        return;
    ans->headers[ans->nheaders].name = name;
    size_t n = strlen(value);
    if (n >= sizeof ans->headers[0].value)
        n = sizeof ans->headers[0].value - 1;
    memcpy(ans->headers[ans->nheaders].value, value, n);
    ans->headers[ans->nheaders].value[n] = '\0';
    ans->nheaders++;
}

/* The static name for a header response.c writes (evhttp adds the rest
 * itself), or NULL. */
static const char *own_header(const char *line, size_t len)
{
    static const char *const names[] = {"X-RateLimit-Limit", "X-RateLimit-Remaining",
                                        "X-RateLimit-Reset", "Retry-After"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        size_t n = strlen(names[i]);
        if (len > n + 2 && strncasecmp(line, names[i], n) == 0 && line[n] == ':')
            return names[i];
    }
    return NULL;
}

/* Splits a response rendered in b into ans. */
static void split(struct buf *b, struct answer *ans)
{
    memset(ans, 0, sizeof *ans);
    buf_append_char(b, '\0');
    ans->status = atoi(b->data + 9); /* "HTTP/1.1 " */
    char *end = strstr(b->data, "\r\n\r\n");
    for (char *line = strstr(b->data, "\r\n") + 2; line < end;) {
        char *eol = strstr(line, "\r\n");
        const char *name = own_header(line, (size_t)(eol - line));
        if (name) {
            *eol = '\0';
            answer_add_header(ans, name, line + strlen(name) + 2);
        }
        line = eol + 2;
    }
    ans->body = xstrdup(end + 4);
    buf_free(b);
}

void answer_verdict(const struct verdict *v, struct answer *ans)
{
    struct buf b = {0};
    response_verdict(&b, v, 0);
    split(&b, ans);
}

void answer_error(int status, const char *code, const char *message, struct answer *ans)
{
    struct buf b = {0};
    response_error(&b, status, code, message, NULL, NULL, 0);
    split(&b, ans);
}

void answer_free(struct answer *ans)
{
    free(ans->body);
    ans->body = NULL;
}
