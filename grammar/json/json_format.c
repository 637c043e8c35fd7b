/* json_format.c — JSON Schema `format` values as regular languages.
 *
 * Layering: grammar/json (json_internal.h), over
 * regex_parse.c. Pure: each format is a fixed regex of grammar.h's
 * dialect, parsed into a decoded-string AST on request.
 *
 * Every regex here is a SUBSET of what the usual validators accept
 * (Python jsonschema's FormatChecker with rfc3339-validator,
 * rfc3986-validator, fqdn, ipaddress, uuid; the JSON Schema spec's
 * RFCs), never a superset: a format must not let through a string a
 * validator rejects. Where the exact set is not regular or not worth it,
 * the subset is the common shape:
 *   date       RFC 3339 full-date, real calendar days (Feb 29 in leap
 *              years only), years 0001..9999 (Python has no year 0);
 *   time       RFC 3339 full-time, seconds 00..59 (no leap second), T/Z
 *              in either case;
 *   date-time  date "T" time;
 *   duration   RFC 3339 appendix A (P1Y2M3DT4H5M6S, P3W...);
 *   email      dot-atom local part @ a hostname (what RFC 5321 calls a
 *              domain; no quoted local parts, no address literals);
 *   hostname   RFC 1123 labels (letters, digits, inner hyphens), at
 *              most 4 of them, the first at most 63 characters, the
 *              others 62, so that the total stays <= 253; the last
 *              starts with a letter (fqdn refuses all-numeric top-level
 *              labels);
 *   ipv4       dotted quad, no leading zeros (Python's ipaddress);
 *   ipv6       RFC 4291 text forms, with "::" and a trailing IPv4;
 *   uuid       8-4-4-4-12 hex digits;
 *   uri, uri-reference  RFC 3986 exactly (IPvFuture and zone ids aside);
 *   json-pointer, relative-json-pointer  RFC 6901 / the draft;
 *   uri-template  RFC 6570 level 4 with ASCII literals and the defined
 *              operators;
 *   iri, iri-reference, idn-email  their ASCII forms (uri,
 *              uri-reference, email);
 *   regex      a subset of what both ECMA-262 and Python's re compile
 *              (below).
 */
#include <string.h>

#include "grammar/json/json_internal.h"

#define DEC_OCTET "(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
#define IPV4 DEC_OCTET "(?:\\." DEC_OCTET "){3}"
#define H16 "[0-9a-fA-F]{1,4}"
#define LS32 "(?:" H16 ":" H16 "|" IPV4 ")"
/* RFC 3986's IPv6address, line by line */
#define IPV6                                                   \
    "(?:(?:" H16 ":){6}" LS32                                  \
    "|::(?:" H16 ":){5}" LS32                                  \
    "|(?:" H16 ")?::(?:" H16 ":){4}" LS32                      \
    "|(?:(?:" H16 ":){0,1}" H16 ")?::(?:" H16 ":){3}" LS32     \
    "|(?:(?:" H16 ":){0,2}" H16 ")?::(?:" H16 ":){2}" LS32     \
    "|(?:(?:" H16 ":){0,3}" H16 ")?::" H16 ":" LS32            \
    "|(?:(?:" H16 ":){0,4}" H16 ")?::" LS32                    \
    "|(?:(?:" H16 ":){0,5}" H16 ")?::" H16                     \
    "|(?:(?:" H16 ":){0,6}" H16 ")?::)"

#define YEAR "(?:[1-9][0-9]{3}|0[1-9][0-9]{2}|00[1-9][0-9]|000[1-9])"
#define LEAP "(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)"
#define DATE                                                               \
    "(?:" YEAR "-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])"         \
    "|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))" \
    "|" LEAP "-02-29)"
#define TIME                                                              \
    "(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]+)?"           \
    "(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"

/* labels of at most 63 (first) and 62 (others) characters, at most 4 of
 * them (253 characters at most); the last starts with a letter */
#define HOSTNAME                                                          \
    "(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\\."                  \
    "(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,60}[A-Za-z0-9])?\\.){0,2})?"          \
    "[A-Za-z](?:[A-Za-z0-9-]{0,60}[A-Za-z0-9])?"

#define EMAIL                                                                   \
    "[A-Za-z0-9!#$%&'*+/=?^_`{|}~\\-]+(?:\\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~\\-]+)*@" HOSTNAME

#define UNRESERVED "A-Za-z0-9\\-._~"
#define SUBDELIMS "!$&'()*+,;="
#define PCT "%[0-9A-Fa-f]{2}"
#define PCHAR "(?:[" UNRESERVED SUBDELIMS ":@]|" PCT ")"
#define SEGMENT PCHAR "*"
#define SEGMENT_NZ PCHAR "+"
#define SEGMENT_NZ_NC "(?:[" UNRESERVED SUBDELIMS "@]|" PCT ")+"
#define REG_NAME "(?:[" UNRESERVED SUBDELIMS "]|" PCT ")*"
#define USERINFO "(?:[" UNRESERVED SUBDELIMS ":]|" PCT ")*"
#define IP_LITERAL "\\[(?:" IPV6 "|[vV][0-9A-Fa-f]+\\.[" UNRESERVED SUBDELIMS ":]+)\\]"
#define AUTHORITY "(?:" USERINFO "@)?(?:" IP_LITERAL "|" REG_NAME ")(?::[0-9]*)?"
#define PATH_ABEMPTY "(?:/" SEGMENT ")*"
#define PATH_ABSOLUTE "/(?:" SEGMENT_NZ "(?:/" SEGMENT ")*)?"
#define PATH_ROOTLESS SEGMENT_NZ "(?:/" SEGMENT ")*"
#define PATH_NOSCHEME SEGMENT_NZ_NC "(?:/" SEGMENT ")*"
#define QUERY "(?:\\?(?:" PCHAR "|[/?])*)?"
#define FRAGMENT "(?:#(?:" PCHAR "|[/?])*)?"
#define URI                                                                     \
    "[A-Za-z][A-Za-z0-9+\\-.]*:(?://" AUTHORITY PATH_ABEMPTY "|" PATH_ABSOLUTE \
    "|" PATH_ROOTLESS "|)" QUERY FRAGMENT
/* RFC 6570 (level 4): literals of ASCII (ucschar and iprivate left out),
 * expressions with the operators the RFC defines (its reserved ones left
 * out), variable names of ALPHA / DIGIT / "_" with inner dots, prefix
 * modifiers 1..9999 or explode */
#define UT_LITERAL "(?:[!#$&(-;=?-\\[\\]_a-z~]|" PCT ")"
#define UT_VARSPEC "[A-Za-z0-9_](?:\\.?[A-Za-z0-9_])*(?::[1-9][0-9]{0,3}|\\*)?"
#define UT_EXPR "\\{[+#./;?&]?" UT_VARSPEC "(?:," UT_VARSPEC ")*\\}"
#define URI_TEMPLATE "(?:" UT_LITERAL "|" UT_EXPR ")*"

#define RELATIVE_REF                                                              \
    "(?://" AUTHORITY PATH_ABEMPTY "|" PATH_ABSOLUTE "|" PATH_NOSCHEME "|)" QUERY \
    FRAGMENT

typedef struct fmt {
    const char *name;
    const char *rx; /* NULL: asserted by validators but not enforced here */
} fmt;

static const fmt formats[] = {
    {"date", DATE},
    {"time", TIME},
    {"date-time", DATE "[Tt]" TIME},
    {"duration",
     "P(?:(?:[0-9]+D|[0-9]+M(?:[0-9]+D)?|[0-9]+Y(?:[0-9]+M(?:[0-9]+D)?)?)"
     "(?:T(?:[0-9]+H(?:[0-9]+M(?:[0-9]+S)?)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S))?"
     "|T(?:[0-9]+H(?:[0-9]+M(?:[0-9]+S)?)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S)|[0-9]+W)"},
    {"email", EMAIL},
    {"hostname", HOSTNAME},
    {"host-name", HOSTNAME},
    {"ipv4", IPV4},
    {"ip-address", IPV4},
    {"ipv6", IPV6},
    {"uuid", "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"},
    {"uri", URI},
    {"uri-reference", "(?:" URI "|" RELATIVE_REF ")"},
    {"json-pointer", "(?:/(?:[^~/]|~[01])*)*"},
    {"relative-json-pointer", "(?:0|[1-9][0-9]*)(?:#|(?:/(?:[^~/]|~[01])*)*)"},
    {"uri-template", URI_TEMPLATE},
    /* internationalized forms: their ASCII subsets (every URI is an IRI,
     * every ASCII address an idn-email) */
    {"iri", URI},
    {"iri-reference", "(?:" URI "|" RELATIVE_REF ")"},
    {"idn-email", EMAIL},
    /* asserted by common validators, not enforced here: refused
     * (idn-hostname: IDNA refuses some ASCII labels, such as "ab--c") */
    {"idn-hostname", NULL},
    {"color", NULL},
};

/* ---- "regex": a subset of the regexes both ECMA-262 and Python's re
 * compile, as a regex (written out here, its ranges and counts
 * enumerated so that only valid ones appear) ----
 *
 * Pieces: a literal (any character but the metacharacters and controls),
 * `.`, an escape (\d \D \w \W \s \S \n \t \r, a metacharacter or `/`;
 * `\-` only in classes, as ECMA-262's unicode mode wants), a class (`[`, `^`?, literals, escapes and ranges within
 * digits, lowercase or uppercase with low <= high, a `-` last, `]`) or a
 * group (`(` or `(?:`, a regex, `)`, nested 3 deep), each with at most one
 * quantifier (* + ? {n} {n,} {n,m}, one digit each, n <= m) and a lazy
 * `?`; anchors (^ $ \b \B) without quantifiers; `|` anywhere (empty
 * alternatives are valid in both). */
#define RX_NESTING 3

static void rx_ranges(js_buf *b, char lo, char hi) {
    for (char c = lo; c <= hi; c++)
        tr_js_buf_printf(b, "|%c-[%c-%c]", c, c, hi);
}

static void rx_piece_common(js_buf *b) {
    tr_js_buf_puts(b, "[^.^$*+?()\\[\\]{}|\\\\\\x00-\\x1f]|\\.");
    tr_js_buf_puts(b, "|\\\\[dDwWsSntr.^$*+?()\\[\\]{}|\\\\/]");
    /* class */
    tr_js_buf_puts(b, "|\\[\\^?(?:[^\\]\\[\\\\\\-^\\x00-\\x1f]"
                      "|\\\\[dDwWsSntr.^\\[\\]\\\\/\\-]");
    rx_ranges(b, '0', '9');
    rx_ranges(b, 'a', 'z');
    rx_ranges(b, 'A', 'Z');
    tr_js_buf_puts(b, ")+-?\\]");
}

static void rx_quant(js_buf *b) {
    tr_js_buf_puts(b, "(?:(?:[*+?]|\\{[0-9],?\\}");
    for (char c = '0'; c <= '9'; c++) tr_js_buf_printf(b, "|\\{%c,[%c-9]\\}", c, c);
    tr_js_buf_puts(b, ")\\?" "?)?"); /* split: ??) is a trigraph */
}

/* The regexes nested up to depth levels of groups. */
static void rx_alt(js_buf *b, int depth) {
    tr_js_buf_puts(b, "(?:(?:");
    rx_piece_common(b);
    if (depth > 0) {
        tr_js_buf_puts(b, "|\\((?:\\?:)?");
        rx_alt(b, depth - 1);
        tr_js_buf_puts(b, "\\)");
    }
    tr_js_buf_puts(b, ")");
    rx_quant(b);
    tr_js_buf_puts(b, "|[\\^$|]|\\\\[bB])*");
}

static const fmt *find(const char *name) {
    for (size_t i = 0; i < TR_ARRAY_LEN(formats); i++)
        if (strcmp(formats[i].name, name) == 0) return &formats[i];
    return NULL;
}

bool tr_js_format_is_asserted(const char *name) {
    return find(name) != NULL || strcmp(name, "regex") == 0;
}

tr_status tr_js_format_ast(gcc *cc, const char *name, gre_node **out, bool *known) {
    *out = NULL;
    if (strcmp(name, "regex") == 0) {
        *known = true;
        js_buf b;
        tr_js_buf_init(&b, cc);
        rx_alt(&b, RX_NESTING);
        tr_status st = js_buf_ok(&b) ? tr_regex_parse(cc, b.p, b.n, out) : cc->err;
        tr_js_buf_free(&b);
        return st;
    }
    const fmt *f = find(name);
    *known = f && f->rx;
    if (!*known) return TR_OK;
    return tr_regex_parse(cc, f->rx, strlen(f->rx), out);
}
