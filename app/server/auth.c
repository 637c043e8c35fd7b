/* auth.c — API keys. The key is compared in constant time (the time
 * depends only on the lengths, never on where the bytes differ) and is
 * never logged or echoed: a failed check says only that the key is
 * missing or wrong. Loop thread. */
#include <string.h>
#include <strings.h>

#include "app/server/server_internal.h"

static bool equal_ct(const char *a, size_t na, const char *b, size_t nb) {
    /* compare over the key's length whatever the candidate's, so that the
     * time does not reveal a matching prefix either */
    volatile unsigned char diff = (unsigned char)(na != nb);
    for (size_t i = 0; i < na; i++) {
        unsigned char cb = i < nb ? (unsigned char)b[i] : 0;
        diff |= (unsigned char)a[i] ^ cb;
    }
    return diff == 0;
}

bool tr_srv_auth_ok(const tr_srv *s, const char *authorization) {
    const char *key = s->cfg.api_key;
    if (!key || !*key) return true;
    if (!authorization) return false;
    const char *p = authorization;
    if (strncasecmp(p, "Bearer ", 7) != 0) return false;
    p += 7;
    while (*p == ' ') p++;
    size_t n = strlen(p);
    while (n && (p[n - 1] == ' ' || p[n - 1] == '\t')) n--;
    return equal_ct(key, strlen(key), p, n);
}
