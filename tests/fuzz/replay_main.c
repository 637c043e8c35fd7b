/* replay_main.c — runs a libFuzzer target over every file of a corpus
 * folder (and over a few built-in inputs), so fuzz targets run in every
 * ctest pass without libFuzzer. Exit 0 when every input was processed
 * (a crash or sanitizer report fails the test). */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int main(int argc, char **argv) {
    static const char *const builtins[] = {"", "\0", "GGUF", "{", "[[[["};
    for (size_t i = 0; i < TR_ARRAY_LEN(builtins); i++)
        LLVMFuzzerTestOneInput((const uint8_t *)builtins[i],
                               strlen(builtins[i]) + (i == 1));
    int n = 0;
    for (int a = 1; a < argc; a++) {
        DIR *d = opendir(argv[a]);
        if (!d) continue; /* an empty corpus is fine */
        struct dirent *e;
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.') continue;
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[a], e->d_name);
            char *buf;
            size_t len;
            if (tr_read_file(path, &buf, &len) != 0) continue;
            LLVMFuzzerTestOneInput((const uint8_t *)buf, len);
            free(buf);
            n++;
        }
        closedir(d);
    }
    printf("replayed %d corpus inputs\n", n);
    return 0;
}
