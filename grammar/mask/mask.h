/* mask.h — a vocabulary's byte trie and the token masks of DFA states:
 * the tokens whose bytes a state can consume without dying, memoized per
 * (DFA, vocabulary) under a byte budget. The contract of grammar/mask/
 * for the layers above it (cfg/ builds its stack-aware masks on the
 * same trie; the façade's regex matcher fills masks from the memo).
 *
 * Layering: grammar/mask, over grammar/regex (regex.h: the gdfa it walks)
 * and base; knows nothing of stacks, grammar texts or JSON. The public
 * side of the vocabulary (tr_grammar_vocab_*, tr_grammar_mask_*) is
 * declared in grammar/grammar.h and defined in vocab.c.
 *
 *   DFA + vocabulary trie (vocab.c) --mask.c--> token masks, memoized per
 *                             (DFA, state) in a gmask_cache
 *
 * The DFA + trie + mask-cache trio is deliberately independent of where
 * the DFA came from: a regex, or the regular terminals of the EBNF and
 * JSON Schema compilers.
 *
 * Threads: a vocabulary is immutable once built (its ext pointer aside,
 * set once by compare-and-swap) and shared; a gmask_cache is filled
 * lock-free by any number of threads.
 */
#ifndef TR_GRAMMAR_MASK_H
#define TR_GRAMMAR_MASK_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "grammar/grammar.h"
#include "grammar/regex/regex.h"

/* ---------------------------------------------------------------------
 * Vocabulary and its byte trie (vocab.c)
 * ------------------------------------------------------------------- */

/* The trie is a flat array in depth-first preorder (children by byte),
 * node 0 the root (empty prefix), stored as parallel arrays (the walk
 * touches each field of a node once; separate arrays keep the hot loop's
 * loads dense). A node's subtree is the contiguous run [i, next[i]); its
 * parent is the last node before it with depth one less.
 *
 *   i:      0     1     2     3     4     5
 *   byte:   -    'a'   'b'   'c'   'b'   'x'      tokens: a ab abc b bx
 *   depth:  0     1     2     3     1     2
 *   next:   6     4     4     4     6     6
 *   tok:    N    id(a) id(ab) id(abc) id(b) id(bx)      N = n_vocab
 *
 * Walking it through a DFA keeps the state reached at each depth on a
 * stack; a dead transition skips to next[i] (the whole subtree dies). A
 * node where no token ends has tok = n_vocab: the walk then sets the bit
 * just past the vocabulary in a scratch mask of n_words + 1 words instead
 * of branching (measured: the branch on "has a token" mispredicts on
 * about half the nodes and doubled the walk time). Ids with the same
 * bytes as an earlier token are not in the trie: they are listed in dups
 * as (representative, duplicate) and copied afterwards. Special tokens,
 * EOG tokens and empty tokens are not in the trie. */
typedef struct gtrie {
    uint32_t n_nodes;
    uint8_t *byte;   /* [n_nodes] last byte of the prefix */
    uint16_t *depth; /* [n_nodes] length of the prefix */
    uint32_t *tok;   /* [n_nodes] token ending here, or n_vocab */
    uint32_t *next;  /* [n_nodes] first node after the subtree */
    /* Check nodes, for the mask walk's ASCII shortcut (mask.c): the nodes
     * whose subtree (own byte included) has only ASCII bytes and at least
     * GTRIE_CHECK_MIN nodes, in preorder (they nest). For each: the set
     * of bytes its subtree uses and its tokens as a slice of ptoks (all
     * trie tokens in preorder). SmolLM2: 4,640 check nodes. */
    uint32_t n_checks;
    uint32_t *check;       /* [n_checks] node index */
    uint64_t (*cbits)[2];  /* [n_checks] bytes 0..127 used in the subtree */
    uint32_t *ctok_lo;     /* [n_checks] slice of ptoks */
    uint32_t *ctok_hi;
    uint16_t *cheight;     /* [n_checks] longest path in the subtree, in
                              bytes, the check node's own byte included */
    uint32_t *ptoks;       /* trie tokens in preorder */
    uint16_t *plen;        /* their byte lengths */
    uint32_t *pfirst;      /* [n_nodes + 1] the tokens of node i's subtree
                              are ptoks[pfirst[i] .. pfirst[next[i]]) */
    /* The biggest check nodes' tokens also as masks ([n_checks], NULL for
     * the others): taking a whole subtree is then an OR of n_words words
     * instead of a scattered bit per token (SmolLM2: 60 check nodes hold
     * 256 tokens or more, 29,800 in all; a token costs ~4 instructions, a
     * word a fraction of one). Only nodes with at least n_words / 4
     * tokens, largest first, within GTRIE_CMASK_BYTES. */
    uint64_t **cmask;
    /* The root's children by byte (node index, 0: no token starts with
     * that byte): a walk from the root skips the children whose byte its
     * state refuses without visiting them (they lie ~400 nodes apart in
     * preorder, so stepping from one to the next was a cache miss each:
     * ~250 of them, a third of a narrow state's mask). root_cum[b]: the
     * tokens whose first byte is below b (so a range of first bytes, a
     * byte class, counts in one subtraction). */
    uint32_t root[256];
    uint32_t root_cum[257];
    uint64_t root_bits[4]; /* the bytes b with root[b] */
    uint32_t root_ck[256]; /* the first check node at or after root[b] */
} gtrie;

#define GTRIE_CMASK_BYTES (4u << 20)

/* ORs the tokens of check node ck into mask. */
static inline void gtrie_take_check(const gtrie *tr, uint32_t ck, size_t n_words,
                                    uint64_t *mask) {
    const uint64_t *cm = tr->cmask[ck];
    if (cm) {
        for (size_t w = 0; w < n_words; w++) mask[w] |= cm[w];
        return;
    }
    for (uint32_t k = tr->ctok_lo[ck]; k < tr->ctok_hi[ck]; k++) {
        uint32_t id = tr->ptoks[k];
        mask[id >> 6] |= 1ull << (id & 63);
    }
}

/* Subtrees smaller than this are walked, not checked: a check costs about
 * as much as stepping a few nodes. */
#define GTRIE_CHECK_MIN 16u

#define GVOCAB_SPECIAL 1u
#define GVOCAB_EOG 2u

/* Data a layer above hangs off a vocabulary, to share it between every
 * grammar matched against that vocabulary: it starts with this header,
 * whose free function the vocabulary calls when it is freed (it knows
 * nothing else of it). */
typedef struct gvocab_ext {
    void (*free)(struct gvocab_ext *e);
} gvocab_ext;

/* JSON's whitespace bytes: space, tab, LF, CR (the vocabulary lists the
 * tokens that start with a run of them: ws_lead_ids). */
static inline bool tr_is_json_ws(uint8_t b) {
    return b == ' ' || b == '\t' || b == '\n' || b == '\r';
}

struct grammar_vocab {
    atomic_uint refs;
    uint64_t uid; /* process-unique: keys mask caches */
    int32_t n_vocab;
    size_t n_words;
    uint8_t *bytes;    /* all token bytes */
    uint64_t *offs;    /* [n_vocab + 1] */
    uint8_t *flags;    /* [n_vocab] GVOCAB_* */
    int32_t *eog;      /* [n_eog] */
    size_t n_eog;
    gtrie trie;
    int32_t (*dups)[2];
    uint32_t n_dups;
    uint32_t max_len; /* longest token in the trie */
    uint64_t *trie_bits; /* [n_words + 1] every token of the trie */
    /* The trie's tokens that start with whitespace (space, tab, LF, CR),
     * by the length of that run, longest first: a JSON grammar's mask
     * after a run of blanks drops those that would make it too long
     * (cfg_mask.c). */
    int32_t *ws_lead_ids;  /* [n_ws_lead] */
    uint32_t *ws_lead_len; /* [n_ws_lead] */
    uint32_t n_ws_lead;
    /* Token sets of looping lexer regions (the inside of a JSON string,
     * digits...), shared by every grammar using this vocabulary
     * (grammar/cfg/cfg_mask.c, "Regions"); made on first use, lock-free,
     * freed with the vocabulary. */
    _Atomic(gvocab_ext *) rcache;
    /* The tokens with a '"' (grammar/json_keys.c): made on first use,
     * lock-free, freed with the vocabulary. */
    _Atomic(gvocab_ext *) qcache;
};

/* ---------------------------------------------------------------------
 * Token masks (mask.c)
 * ------------------------------------------------------------------- */

/* Memo of the masks of one DFA's states for one vocabulary. Slots are
 * filled at most once each (compare-and-swap; the loser frees its copy),
 * so readers never lock. A byte budget bounds the memo: when a new mask
 * would exceed it, that mask is computed and returned but not kept, and
 * later requests for that state recompute it. */
typedef struct gmask_cache {
    uint64_t vocab_uid;
    uint32_t n_states;
    size_t n_words;
    uint64_t budget;
    atomic_uint_fast64_t used;   /* bytes of masks held */
    _Atomic(uint64_t *) *slots; /* [n_states] */
    struct gmask_cache *next;    /* list in the owning grammar */
} gmask_cache;

gmask_cache *tr_mask_cache_new(const gdfa *d, const grammar_vocab *v,
                             uint64_t budget);
void tr_mask_cache_free(gmask_cache *c);
/* Writes state s's mask into out[0..n_words), from the memo (returns
 * true) or computed (false; then memoized if the budget allows). c may be
 * NULL (no memo: always computed). scratch holds n_words + 1 words.
 * Thread-safe. */
bool tr_mask_cache_fill(gmask_cache *c, const gdfa *d, uint32_t s,
                      const grammar_vocab *v, uint32_t *stack,
                      uint64_t *scratch, uint64_t *out);

#endif
