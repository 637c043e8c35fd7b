/* log.h — the logger, the one piece of global mutable state Trellis allows.
 *
 * Messages go to stderr, prefixed with the level. The level is set once at
 * start-up (by main or the embedder) and read by every thread; a relaxed
 * atomic makes that race-free. Thread-safe: each message is one fprintf.
 */
#ifndef TR_BASE_LOG_H
#define TR_BASE_LOG_H

typedef enum tr_log_level {
    TR_LOG_ERROR = 0,
    TR_LOG_WARN = 1,
    TR_LOG_INFO = 2,
    TR_LOG_DEBUG = 3,
} tr_log_level;

void tr_log_set_level(tr_log_level level);
tr_log_level tr_log_get_level(void);
void tr_log(tr_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
