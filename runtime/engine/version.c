/* version.c — trellis_version and trellis_version_number (trellis.h): the
 * version CMake's project(VERSION) names, passed to this file alone as
 * TRELLIS_VERSION_MAJOR/_MINOR/_PATCH (CMakeLists.txt), so that a new
 * version recompiles one file and the number is written once.
 *
 * Layering: runtime/engine (the public API); pure, any thread.
 */
#include "trellis.h"

#if !defined(TRELLIS_VERSION_MAJOR) || !defined(TRELLIS_VERSION_MINOR) || \
    !defined(TRELLIS_VERSION_PATCH)
#error "TRELLIS_VERSION_MAJOR/_MINOR/_PATCH come from CMake's project(VERSION)"
#endif

#define TR_STR_(x) #x
#define TR_STR(x) TR_STR_(x)

const char *trellis_version(void) {
    return TR_STR(TRELLIS_VERSION_MAJOR) "." TR_STR(TRELLIS_VERSION_MINOR) "." TR_STR(
        TRELLIS_VERSION_PATCH);
}

int trellis_version_number(void) {
    return TRELLIS_VERSION_MAJOR * 1000000 + TRELLIS_VERSION_MINOR * 1000 +
           TRELLIS_VERSION_PATCH;
}
