/* ui.c — the playground's files and their headers (ui_internal.h). */
#include <string.h>

#include "app/server/ui_internal.h"

const char tr_ui_headers[] =
    "Content-Security-Policy: default-src 'none'; script-src 'self'; style-src 'self'; "
    "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'\r\n"
    "X-Content-Type-Options: nosniff\r\n"
    "Referrer-Policy: no-referrer\r\n"
    "Cache-Control: no-cache\r\n";

const tr_embedded_file *tr_ui_find(const char *path) {
    const char *name = NULL;
    if (strcmp(path, "/") == 0)
        name = "index.html";
    else if (strncmp(path, "/ui/", 4) == 0)
        name = path + 4;
    if (!name || !*name) return NULL;
    for (const tr_embedded_file *f = tr_ui_files; f->path; f++)
        if (strcmp(f->path, name) == 0) return f;
    return NULL;
}

const char *tr_ui_content_type(const char *name) {
    const char *dot = strrchr(name, '.');
    if (dot && strcmp(dot, ".html") == 0) return "text/html; charset=utf-8";
    if (dot && strcmp(dot, ".js") == 0) return "text/javascript; charset=utf-8";
    if (dot && strcmp(dot, ".css") == 0) return "text/css; charset=utf-8";
    return "application/octet-stream";
}
