/* temp_dir.h — a fresh folder per test and its removal, shared by the
 * tests that write files (the disk tier's: test_kv_disk.c,
 * test_engine_disk.c). The folder is made under $TMPDIR (else /tmp).
 * Static inline; assertions through cmocka.
 */
#ifndef TR_TESTS_UNIT_TEMP_DIR_H
#define TR_TESTS_UNIT_TEMP_DIR_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A new empty folder named PREFIX-XXXXXX; malloc'd path (free it). */
static inline char *temp_dir_make(const char *prefix) {
    const char *t = getenv("TMPDIR");
    char tmpl[4096];
    snprintf(tmpl, sizeof tmpl, "%s/%s-XXXXXX", t && *t ? t : "/tmp", prefix);
    char *d = mkdtemp(tmpl);
    assert_non_null(d);
    char *r = strdup(d);
    assert_non_null(r);
    return r;
}

/* Removes path and everything under it (symbolic links not followed). */
static inline void temp_dir_remove(const char *path) {
    DIR *d = opendir(path);
    if (d) {
        char p[4096];
        for (struct dirent *de; (de = readdir(d));) {
            if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
            snprintf(p, sizeof p, "%.3800s/%.255s", path, de->d_name);
            struct stat sb;
            if (lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode)) temp_dir_remove(p);
            else unlink(p);
        }
        closedir(d);
    }
    rmdir(path);
}

#endif
