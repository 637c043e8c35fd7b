/* ui_internal.h — the playground page: files of app/server/ui/ built into
 * the binary (cmake/embed_files.cmake writes tr_ui_files), served at `/`
 * and `/ui/<file>` with a strict Content-Security-Policy (nothing but this
 * server: no inline script or style, no other host), unless --no-ui.
 *
 * Layering: app/server; used by routes.c.
 */
#ifndef TR_SERVER_UI_INTERNAL_H
#define TR_SERVER_UI_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

typedef struct tr_embedded_file {
    const char *path;          /* relative to app/server/ui */
    const unsigned char *data; /* NUL-terminated */
    size_t len;                /* without the NUL */
} tr_embedded_file;

extern const tr_embedded_file tr_ui_files[]; /* ended by {NULL} */

/* The file a GET of `path` asks for ("/" is index.html), or NULL when the
 * path is not the page's. */
const tr_embedded_file *tr_ui_find(const char *path);

/* Its Content-Type, from the file name's extension. */
const char *tr_ui_content_type(const char *name);

/* The headers every page response carries (CSP and friends), CRLF-ended. */
extern const char tr_ui_headers[];

#endif
