/* _refscan: the compiled core of opctx.context.references (spec section 3.3).
 *
 *   extract(text, limit, stop_words) -> list[str]
 *       extract_distinctive() without the regex engine: one pass over the code points
 *       finds the path, hex-id and CamelCase candidates, a second one the backtick
 *       snippets; the selection rules (filters, stop-words, de-duplication, priority,
 *       limit) then run on spans of the text, so only the selected strings become objects.
 *
 *   Scanner(limit, stop_words)
 *       .add(text) -> list[tuple[int, list[str]]]
 *       The reference tracker's state: the distinctive strings of the messages not cited
 *       yet. ``add`` scans the new text, reports each earlier message it cites (its index
 *       and which of its strings the text contains), drops the strings of those messages,
 *       and files the new text's own strings. Exact: a message is cited by the first later
 *       text that contains one of its strings, as in the specification's quadratic scan.
 *
 * Equivalence of the run scans with the regexes of references.py (tests compare both):
 *   path      (?<![P])[P]+/[P]+, P = [A-Za-z0-9_./-]: a maximal P-run holding a "/" with at
 *             least one character on each side; the match is the whole run.
 *   hex id    [a-f0-9]{6,}: a maximal [a-f0-9] run of six or more.
 *   backtick  `([^`\n]{3,40})`: at each backtick, the next backtick or newline decides.
 *   CamelCase [A-Z](?=[A-Za-z0-9]*?[a-z])(?=[A-Za-z0-9]*?[A-Z0-9])[A-Za-z0-9]{3,}: in a
 *             maximal alphanumeric run only its first capital can start a match (the
 *             look-aheads only get harder further right); the match runs to the run's end.
 *
 * How the scanner finds strings without the quadratic scan
 * --------------------------------------------------------
 * Every distinctive string has three or more characters. Each live string is filed under
 * one of its three-character windows (its *anchor*) in a small hash table; the scan of a
 * new text computes the window at every position, and a window that is some string's
 * anchor has that string compared in place (memcmp). So every occurrence is found, and
 * the cost is one table probe per character plus the comparisons. To keep comparisons
 * rare, a string is anchored at the window seen least often so far in all texts (a
 * 32,768-entry table of window counts), so a string is not filed under "src" or "the"
 * when it has a rarer window.
 * The table only holds the strings of messages not cited yet (a message cited once is
 * not checked again, as in the specification), a few thousand at most in practice, so it
 * stays in the processor's cache. A string can have only one holder: a later message
 * that holds it too contains it, and so cites the first holder before filing its own.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__GNUC__)
#define ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define ALWAYS_INLINE inline
#endif

/* One bit per property of an ASCII character, so the scans test bits with shifts and
 * masks, not comparisons (see scan_runs for why). */
enum { B_UPPER, B_LOWER, B_DIGIT, B_PUNCT, B_HEX, B_ALNUM, B_PATH, B_SLASH };
#define BIT(b) (1u << (b))

static unsigned char char_bits[128];

static void
init_classes(void)
{
    for (int c = 0; c < 128; c++) {
        unsigned v = 0;
        if (c >= 'A' && c <= 'Z') v |= BIT(B_UPPER);
        if (c >= 'a' && c <= 'z') v |= BIT(B_LOWER);
        if (c >= '0' && c <= '9') v |= BIT(B_DIGIT);
        if (c == '_' || c == '.' || c == '/' || c == '-') v |= BIT(B_PUNCT); /* path punctuation */
        if ((c >= 'a' && c <= 'f') || (c >= '0' && c <= '9')) v |= BIT(B_HEX);
        if (v & (BIT(B_UPPER) | BIT(B_LOWER) | BIT(B_DIGIT))) v |= BIT(B_ALNUM);
        if (v & (BIT(B_ALNUM) | BIT(B_PUNCT))) v |= BIT(B_PATH);
        if (c == '/') v |= BIT(B_SLASH);
        char_bits[c] = (unsigned char)v;
    }
}

static PyObject *str_lower; /* interned "lower" */

/* ------------------------------------------------------------------ spans */

typedef struct {
    Py_ssize_t start, end;
} Span;

/* A growable array of spans with room for the common case inline. */
typedef struct {
    Span *v;
    Py_ssize_t n, cap;
    Span local[48];
} Spans;

static void
spans_init(Spans *s)
{
    s->v = s->local;
    s->n = 0;
    s->cap = (Py_ssize_t)(sizeof s->local / sizeof s->local[0]);
}

static void
spans_free(Spans *s)
{
    if (s->v != s->local)
        PyMem_Free(s->v);
}

static int
spans_push(Spans *s, Py_ssize_t start, Py_ssize_t end)
{
    if (s->n == s->cap) {
        Py_ssize_t cap = s->cap * 2;
        Span *v = PyMem_Malloc(cap * sizeof *v);
        if (v == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        memcpy(v, s->v, s->n * sizeof *v);
        spans_free(s);
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n].start = start;
    s->v[s->n].end = end;
    s->n++;
    return 0;
}

typedef struct {
    Spans paths, hexes, snippets, camels;
} Candidates;

/* 1 if a >= b, for small non-negative a and b, without a comparison instruction */
#define AT_LEAST(a, b) ((uint64_t)((Py_ssize_t)(b) - 1 - (Py_ssize_t)(a)) >> 63)

/* The paths, hex ids and CamelCase words inside one maximal run of path characters
 * [start, end). Text is unpredictable (a hex run starts and ends every few letters), so
 * the state of the three kinds of run is kept in counters and 0/1 flags updated with
 * masks: each counter is reset by and-ing it with "this character continues the run",
 * and only the rare "a qualifying run ends here" branches. (With branches and
 * comparisons this loop ran at 17 ns a character: mispredictions, and flags spilled as
 * bytes then reloaded as words, which defeats store forwarding.) Position end acts as
 * one more character of no class, closing the runs. */
static ALWAYS_INLINE int
scan_path_run(int kind, const void *data, Py_ssize_t start, Py_ssize_t end, Candidates *out)
{
    Py_ssize_t hex_len = 0, from_upper = 0, path_len = 0, punct = 0;
    uint64_t hex_digit = 0, upper_seen = 0, lower_after = 0, upper_or_digit_after = 0;
    uint64_t prev_slash = 0, slash_ok = 0;
    for (Py_ssize_t i = start; i <= end; i++) {
        uint64_t k = i < end ? char_bits[PyUnicode_READ(kind, data, i)] : 0; /* all ASCII */
        uint64_t is_path = (k >> B_PATH) & 1, is_hex = (k >> B_HEX) & 1, is_alnum = (k >> B_ALNUM) & 1;
        uint64_t is_upper = (k >> B_UPPER) & 1, is_lower = (k >> B_LOWER) & 1, is_digit = (k >> B_DIGIT) & 1;
        /* runs closing here: a hex id of six or more with a digit ("decade" is a word);
         * CamelCase from the run's first capital, four or more, with a lower-case letter
         * and a capital or digit after that capital; a path of eight or more with three
         * alphanumerics and an inner "/" with a character after it */
        uint64_t closing = ((is_hex ^ 1) & AT_LEAST(hex_len, 6) & hex_digit) |
                           (((is_alnum ^ 1) & AT_LEAST(from_upper, 4) & lower_after & upper_or_digit_after) << 1) |
                           (((is_path ^ 1) & slash_ok & AT_LEAST(path_len, 8) & AT_LEAST(path_len - punct, 3)) << 2);
        if (closing) {
            if ((closing & 1) && spans_push(&out->hexes, i - hex_len, i) < 0)
                return -1;
            if ((closing & 2) && spans_push(&out->camels, i - from_upper, i) < 0)
                return -1;
            if ((closing & 4) && spans_push(&out->paths, i - path_len, i) < 0)
                return -1;
        }
        hex_len = (hex_len + 1) & -(Py_ssize_t)is_hex;
        hex_digit = (hex_digit | is_digit) & is_hex;
        lower_after = (lower_after | (upper_seen & is_lower)) & is_alnum;
        upper_or_digit_after = (upper_or_digit_after | (upper_seen & (is_upper | is_digit))) & is_alnum;
        upper_seen = (upper_seen | is_upper) & is_alnum;
        from_upper = (from_upper + (Py_ssize_t)upper_seen) & -(Py_ssize_t)is_alnum;
        /* a "/" that is not the run's first character, followed by a path character */
        slash_ok = (slash_ok | (prev_slash & is_path)) & is_path;
        prev_slash = ((k >> B_SLASH) & 1) & AT_LEAST(path_len, 1);
        path_len = (path_len + 1) & -(Py_ssize_t)is_path;
        punct = (punct + (Py_ssize_t)((k >> B_PUNCT) & 1)) & -(Py_ssize_t)is_path;
    }
    return 0;
}

/* Paths, hex ids and CamelCase words of the whole text. A maximal run of path
 * characters is found with a tight loop that also ors the bits of its characters; only a
 * run holding a digit (ids need one), a capital (CamelCase) or a "/" (paths) is looked
 * at character by character. Most runs are lower-case words and are skipped. */
static ALWAYS_INLINE int
scan_runs(int kind, const void *data, Py_ssize_t n, Candidates *out)
{
    Py_ssize_t i = 0;
    for (;;) {
        while (i < n && !(PyUnicode_READ(kind, data, i) < 128 && (char_bits[PyUnicode_READ(kind, data, i)] & BIT(B_PATH))))
            i++;
        if (i >= n)
            return 0;
        Py_ssize_t start = i;
        unsigned seen = 0;
        for (; i < n; i++) {
            Py_UCS4 c = PyUnicode_READ(kind, data, i);
            unsigned k = c < 128 ? char_bits[c] : 0;
            if (!(k & BIT(B_PATH)))
                break;
            seen |= k;
        }
        if ((seen & (BIT(B_DIGIT) | BIT(B_UPPER) | BIT(B_SLASH))) && scan_path_run(kind, data, start, i, out) < 0)
            return -1;
    }
}

static ALWAYS_INLINE Py_ssize_t
next_backtick(int kind, const void *data, Py_ssize_t from, Py_ssize_t n)
{
    if (kind == PyUnicode_1BYTE_KIND) {
        const char *hit = memchr((const char *)data + from, '`', n - from);
        return hit ? hit - (const char *)data : n;
    }
    while (from < n && PyUnicode_READ(kind, data, from) != '`')
        from++;
    return from;
}

static ALWAYS_INLINE int
scan_snippets(int kind, const void *data, Py_ssize_t n, Candidates *out)
{
    for (Py_ssize_t i = next_backtick(kind, data, 0, n); i < n; i = next_backtick(kind, data, i, n)) {
        /* the content can hold no backtick: only the next backtick can close it */
        Py_ssize_t end = i + 1, last = i + 41 < n ? i + 41 : n - 1;
        Py_UCS4 c = 0;
        for (; end <= last; end++) {
            c = PyUnicode_READ(kind, data, end);
            if (c == '`' || c == '\n')
                break;
        }
        if (end <= last && c == '`' && end - i - 1 >= 3) {
            if (spans_push(&out->snippets, i + 1, end) < 0)
                return -1;
            i = end + 1;
        }
        else {
            i++;
        }
    }
    return 0;
}

static int
scan_ucs1(const void *d, Py_ssize_t n, Candidates *c)
{
    return scan_runs(PyUnicode_1BYTE_KIND, d, n, c) < 0 ? -1 : scan_snippets(PyUnicode_1BYTE_KIND, d, n, c);
}
static int
scan_ucs2(const void *d, Py_ssize_t n, Candidates *c)
{
    return scan_runs(PyUnicode_2BYTE_KIND, d, n, c) < 0 ? -1 : scan_snippets(PyUnicode_2BYTE_KIND, d, n, c);
}
static int
scan_ucs4(const void *d, Py_ssize_t n, Candidates *c)
{
    return scan_runs(PyUnicode_4BYTE_KIND, d, n, c) < 0 ? -1 : scan_snippets(PyUnicode_4BYTE_KIND, d, n, c);
}

/* ------------------------------------------------------------------ selection */

typedef struct {
    PyObject *set;        /* lower-cased stop-words (a frozenset) */
    Py_ssize_t max_len;   /* longer strings are never stop-words: skip the lookup */
} StopWords;

static int
stop_words_init(StopWords *sw, PyObject *set)
{
    sw->set = set;
    sw->max_len = 0;
    PyObject *it = PyObject_GetIter(set), *w;
    if (it == NULL)
        return -1;
    while ((w = PyIter_Next(it)) != NULL) {
        if (PyUnicode_Check(w) && PyUnicode_GET_LENGTH(w) > sw->max_len)
            sw->max_len = PyUnicode_GET_LENGTH(w);
        Py_DECREF(w);
    }
    Py_DECREF(it);
    return PyErr_Occurred() ? -1 : 0;
}

static int
same_text(int kind, const char *data, Span a, Span b)
{
    Py_ssize_t len = a.end - a.start;
    return len == b.end - b.start && memcmp(data + a.start * kind, data + b.start * kind, len * kind) == 0;
}

/* 1 if span is a stop-word (compared lower-cased), 0 if not, -1 on error */
static int
is_stop_word(PyObject *s, const StopWords *sw)
{
    if (PyUnicode_GET_LENGTH(s) > sw->max_len)
        return 0;
    PyObject *lowered = PyObject_CallMethodNoArgs(s, str_lower);
    if (lowered == NULL)
        return -1;
    int stop = PySet_Contains(sw->set, lowered);
    Py_DECREF(lowered);
    return stop;
}

static int
is_blank(int kind, const void *data, Span s)
{
    for (Py_ssize_t i = s.start; i < s.end; i++)
        if (!Py_UNICODE_ISSPACE(PyUnicode_READ(kind, data, i)))
            return 0;
    return 1;
}

/* The selection rules of references._select on spans: paths, hex ids, snippets, CamelCase
 * in that order, each in order of first appearance, duplicates and (for the last two)
 * stop-words and blank snippets skipped, at most limit. */
static PyObject *
select_strings(PyObject *text, Candidates *cand, Py_ssize_t limit, const StopWords *sw)
{
    PyObject *out = PyList_New(0);
    if (out == NULL || limit <= 0)
        return out;
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    /* Duplicates: up to 64 strings taken (the default limit is 32), compare spans in
     * place; past that (a caller's large limit on a large text) a set keeps it linear. */
    Span taken[64];
    PyObject *seen = NULL;
    Py_ssize_t count = 0;
    Spans *kinds[4] = {&cand->paths, &cand->hexes, &cand->snippets, &cand->camels};
    for (int k = 0; k < 4 && count < limit; k++) {
        for (Py_ssize_t c = 0; c < kinds[k]->n && count < limit; c++) {
            Span s = kinds[k]->v[c];
            int duplicate = 0;
            /* a path holds a "/", an id does not: comparing across kinds is harmless */
            for (Py_ssize_t t = 0; seen == NULL && t < count && !duplicate; t++)
                duplicate = same_text(kind, data, s, taken[t]);
            if (duplicate || (k == 2 && is_blank(kind, data, s)))
                continue;
            PyObject *str = PyUnicode_Substring(text, s.start, s.end);
            if (str == NULL)
                goto error;
            int stop = seen != NULL ? PySet_Contains(seen, str) : 0;
            if (stop == 0 && k >= 2)
                stop = is_stop_word(str, sw);
            int rc = stop == 0 ? PyList_Append(out, str) : 0;
            if (rc == 0 && stop == 0) {
                if (count < 64)
                    taken[count] = s;
                else if (seen == NULL && (seen = PySet_New(out)) == NULL)
                    rc = -1;
                if (seen != NULL && rc == 0)
                    rc = PySet_Add(seen, str);
                count++;
            }
            Py_DECREF(str);
            if (stop < 0 || rc < 0)
                goto error;
        }
    }
    Py_XDECREF(seen);
    return out;
error:
    Py_XDECREF(seen);
    Py_DECREF(out);
    return NULL;
}

static PyObject *
extract_strings(PyObject *text, Py_ssize_t limit, const StopWords *sw)
{
    Candidates cand;
    spans_init(&cand.paths);
    spans_init(&cand.hexes);
    spans_init(&cand.snippets);
    spans_init(&cand.camels);
    const void *data = PyUnicode_DATA(text);
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    int rc;
    switch (PyUnicode_KIND(text)) {
    case PyUnicode_1BYTE_KIND: rc = scan_ucs1(data, n, &cand); break;
    case PyUnicode_2BYTE_KIND: rc = scan_ucs2(data, n, &cand); break;
    default: rc = scan_ucs4(data, n, &cand); break;
    }
    PyObject *out = rc < 0 ? NULL : select_strings(text, &cand, limit, sw);
    spans_free(&cand.paths);
    spans_free(&cand.hexes);
    spans_free(&cand.snippets);
    spans_free(&cand.camels);
    return out;
}

/* extract() is called with the same stop-word set every time: remember its longest word */
static PyObject *cached_stop_set;
static StopWords cached_stop;

static PyObject *
extract(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *text, *stop;
    Py_ssize_t limit;
    if (!PyArg_ParseTuple(args, "UnO!:extract", &text, &limit, &PyFrozenSet_Type, &stop))
        return NULL;
    if (stop != cached_stop_set) {
        if (stop_words_init(&cached_stop, stop) < 0)
            return NULL;
        Py_INCREF(stop);
        Py_XSETREF(cached_stop_set, stop);
    }
    /* a copy: a stop-word's __eq__ may call extract() with another set meanwhile */
    StopWords sw = cached_stop;
    return extract_strings(text, limit, &sw);
}

/* ------------------------------------------------------------------ Scanner */

#define FREQ_BITS 15
typedef uint64_t WindowKey; /* three code points of 21 bits */

static ALWAYS_INLINE WindowKey
window_key(Py_UCS4 a, Py_UCS4 b, Py_UCS4 c)
{
    return ((WindowKey)a << 42) | ((WindowKey)b << 21) | c;
}

static ALWAYS_INLINE uint64_t
mix(WindowKey key)
{
    return key * 0x9E3779B97F4A7C15ULL; /* Fibonacci hashing: take the high bits */
}

typedef struct {
    PyObject *string; /* owned; NULL for a free slot */
    const char *data;
    int kind;
    Py_ssize_t len;
    WindowKey anchor;
    Py_ssize_t offset;  /* of the anchor window in the string */
    int32_t next;       /* next string in the same bucket, or the next free slot */
    int32_t sibling;    /* next string of the same message */
    Py_ssize_t holder;  /* the message holding it */
    uint64_t found_in;  /* the scan number in which it was last found */
} Pattern;

typedef struct {
    int32_t first;      /* its first live string, -1 when none (cited, or never had any) */
    uint64_t collected; /* the scan number in which it was last collected as cited */
} Message;

typedef struct {
    PyObject_HEAD
    Py_ssize_t limit;
    StopWords stop;
    PyObject *stop_set;
    Pattern *patterns;
    int32_t n_slots, cap_slots, free_slot, live;
    int32_t *heads;
    uint64_t head_mask;
    int head_shift;
    Message *messages;
    Py_ssize_t n_messages, cap_messages;
    uint16_t *window_counts;
    uint64_t scans, comparisons;
    int32_t *found, *cited; /* scratch, room for ``live`` entries each */
    int32_t cap_scratch;
    int busy; /* inside add(): a stop-word's __eq__ or a finalizer may call add() again */
} Scanner;

static void
Scanner_dealloc(Scanner *self)
{
    for (int32_t i = 0; i < self->n_slots; i++)
        Py_XDECREF(self->patterns[i].string);
    PyMem_Free(self->patterns);
    PyMem_Free(self->heads);
    PyMem_Free(self->messages);
    PyMem_Free(self->window_counts);
    PyMem_Free(self->found);
    PyMem_Free(self->cited);
    Py_XDECREF(self->stop_set);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
set_heads(Scanner *self, int bits)
{
    uint64_t size = (uint64_t)1 << bits;
    int32_t *heads = PyMem_Malloc(size * sizeof *heads);
    if (heads == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    memset(heads, 0xff, size * sizeof *heads);
    PyMem_Free(self->heads);
    self->heads = heads;
    self->head_mask = size - 1;
    self->head_shift = 64 - bits;
    /* refile the live strings (the free slots have string == NULL) */
    for (int32_t id = 0; id < self->n_slots; id++) {
        Pattern *p = &self->patterns[id];
        if (p->string == NULL)
            continue;
        uint64_t h = mix(p->anchor) >> self->head_shift;
        p->next = heads[h];
        heads[h] = id;
    }
    return 0;
}

static int
Scanner_init(Scanner *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"limit", "stop_words", NULL};
    PyObject *stop;
    Py_ssize_t limit;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "nO!:Scanner", kwlist, &limit, &PyFrozenSet_Type, &stop))
        return -1;
    if (self->stop_set != NULL) { /* also after a failed first call: nothing is set twice */
        PyErr_SetString(PyExc_RuntimeError, "Scanner is initialised once");
        return -1;
    }
    self->limit = limit;
    Py_INCREF(stop);
    self->stop_set = stop;
    if (stop_words_init(&self->stop, stop) < 0)
        return -1;
    self->free_slot = -1;
    self->window_counts = PyMem_Calloc((size_t)1 << FREQ_BITS, sizeof(uint16_t));
    if (self->window_counts == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    return set_heads(self, 10);
}

static int
reserve_scratch(Scanner *self)
{
    if (self->live <= self->cap_scratch)
        return 0;
    int32_t cap = self->live * 2;
    int32_t *found = PyMem_Realloc(self->found, cap * sizeof *found);
    if (found == NULL)
        goto nomem;
    self->found = found;
    int32_t *cited = PyMem_Realloc(self->cited, cap * sizeof *cited);
    if (cited == NULL)
        goto nomem;
    self->cited = cited;
    self->cap_scratch = cap;
    return 0;
nomem:
    PyErr_NoMemory();
    return -1;
}

static ALWAYS_INLINE int
occurs_at(int kind, const char *data, Py_ssize_t start, const Pattern *p)
{
    if (kind == p->kind)
        return memcmp(data + start * kind, p->data, p->len * kind) == 0;
    for (Py_ssize_t k = 0; k < p->len; k++)
        if (PyUnicode_READ(kind, data, start + k) != PyUnicode_READ(p->kind, p->data, k))
            return 0;
    return 1;
}

/* Count every window of the text and collect the live strings it contains into
 * self->found (each once). Returns how many. */
static ALWAYS_INLINE Py_ssize_t
scan_windows(Scanner *self, int kind, const char *data, Py_ssize_t n)
{
    Py_ssize_t count = 0;
    uint64_t scan = self->scans;
    uint16_t *counts = self->window_counts;
    const int32_t *heads = self->heads;
    int shift = self->head_shift;
    int have_live = self->live > 0;
    Py_UCS4 a = PyUnicode_READ(kind, data, 0), b = PyUnicode_READ(kind, data, 1);
    for (Py_ssize_t i = 2; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        WindowKey key = window_key(a, b, c);
        uint64_t hashed = mix(key);
        uint16_t *count_of = &counts[hashed >> (64 - FREQ_BITS)];
        *count_of += *count_of != UINT16_MAX;
        if (have_live) {
            for (int32_t id = heads[hashed >> shift]; id >= 0;) {
                Pattern *p = &self->patterns[id];
                if (p->anchor == key && p->found_in != scan) {
                    Py_ssize_t start = i - 2 - p->offset;
                    if (start >= 0 && start + p->len <= n) {
                        self->comparisons++;
                        if (occurs_at(kind, data, start, p)) {
                            p->found_in = scan;
                            self->found[count++] = id;
                        }
                    }
                }
                id = p->next;
            }
        }
        a = b;
        b = c;
    }
    return count;
}

static Py_ssize_t
scan_windows_ucs1(Scanner *s, const char *d, Py_ssize_t n) { return scan_windows(s, PyUnicode_1BYTE_KIND, d, n); }
static Py_ssize_t
scan_windows_ucs2(Scanner *s, const char *d, Py_ssize_t n) { return scan_windows(s, PyUnicode_2BYTE_KIND, d, n); }
static Py_ssize_t
scan_windows_ucs4(Scanner *s, const char *d, Py_ssize_t n) { return scan_windows(s, PyUnicode_4BYTE_KIND, d, n); }

/* Take a cited message's strings out of the table. */
static void
drop_message(Scanner *self, Py_ssize_t m)
{
    for (int32_t id = self->messages[m].first; id >= 0;) {
        Pattern *p = &self->patterns[id];
        int32_t sibling = p->sibling;
        int32_t *link = &self->heads[mix(p->anchor) >> self->head_shift];
        while (*link != id)
            link = &self->patterns[*link].next;
        *link = p->next;
        Py_CLEAR(p->string);
        p->next = self->free_slot;
        self->free_slot = id;
        self->live--;
        id = sibling;
    }
    self->messages[m].first = -1;
}

/* File string s of message m under its rarest window so far. */
static int
file_string(Scanner *self, PyObject *s, Py_ssize_t m)
{
    int32_t id = self->free_slot;
    if (id >= 0) {
        self->free_slot = self->patterns[id].next;
    }
    else {
        if (self->n_slots == self->cap_slots) {
            int32_t cap = self->cap_slots ? self->cap_slots * 2 : 256;
            Pattern *grown = PyMem_Realloc(self->patterns, cap * sizeof *grown);
            if (grown == NULL) {
                PyErr_NoMemory();
                return -1;
            }
            self->patterns = grown;
            self->cap_slots = cap;
        }
        id = self->n_slots++;
    }
    Pattern *p = &self->patterns[id];
    Py_INCREF(s);
    p->string = s;
    p->kind = PyUnicode_KIND(s);
    p->data = PyUnicode_DATA(s);
    p->len = PyUnicode_GET_LENGTH(s);
    p->holder = m;
    p->found_in = 0;
    uint16_t best = UINT16_MAX;
    p->offset = 0;
    p->anchor = 0;
    for (Py_ssize_t k = 0; k + 2 < p->len; k++) {
        WindowKey key = window_key(PyUnicode_READ(p->kind, p->data, k), PyUnicode_READ(p->kind, p->data, k + 1),
                                   PyUnicode_READ(p->kind, p->data, k + 2));
        uint16_t seen = self->window_counts[mix(key) >> (64 - FREQ_BITS)];
        if (k == 0 || seen < best) {
            best = seen;
            p->offset = k;
            p->anchor = key;
        }
    }
    uint64_t h = mix(p->anchor) >> self->head_shift;
    p->next = self->heads[h];
    self->heads[h] = id;
    p->sibling = self->messages[m].first;
    self->messages[m].first = id;
    self->live++;
    if ((uint64_t)self->live * 2 > self->head_mask + 1)
        return set_heads(self, 64 - self->head_shift + 1);
    return 0;
}

static PyObject *scanner_add(Scanner *self, PyObject *text);

static PyObject *
Scanner_add(Scanner *self, PyObject *text)
{
    if (!PyUnicode_Check(text)) {
        PyErr_Format(PyExc_TypeError, "add() needs a str, got %s", Py_TYPE(text)->tp_name);
        return NULL;
    }
    if (self->heads == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Scanner is not initialised");
        return NULL;
    }
    /* Python code can run inside add() (the stop-word set's __eq__, a finalizer run by an
     * allocation): a nested add() would change the table, the message array and the
     * scratch arrays under the running one */
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "Scanner.add() called again while it runs");
        return NULL;
    }
    self->busy = 1;
    PyObject *result = scanner_add(self, text);
    self->busy = 0;
    return result;
}

static PyObject *
scanner_add(Scanner *self, PyObject *text)
{
    if (self->n_messages == self->cap_messages) {
        Py_ssize_t cap = self->cap_messages ? self->cap_messages * 2 : 1024;
        Message *grown = PyMem_Realloc(self->messages, cap * sizeof *grown);
        if (grown == NULL)
            return PyErr_NoMemory();
        self->messages = grown;
        self->cap_messages = cap;
    }
    if (reserve_scratch(self) < 0)
        return NULL;
    Py_ssize_t m = self->n_messages;
    PyObject *strings = extract_strings(text, self->limit, &self->stop);
    if (strings == NULL)
        return NULL;
    PyObject *result = PyList_New(0);
    if (result == NULL) {
        Py_DECREF(strings);
        return NULL;
    }
    self->scans++;
    Py_ssize_t n = PyUnicode_GET_LENGTH(text), found = 0, cited = 0;
    const char *data = PyUnicode_DATA(text);
    if (n >= 3) {
        switch (PyUnicode_KIND(text)) {
        case PyUnicode_1BYTE_KIND: found = scan_windows_ucs1(self, data, n); break;
        case PyUnicode_2BYTE_KIND: found = scan_windows_ucs2(self, data, n); break;
        default: found = scan_windows_ucs4(self, data, n); break;
        }
    }
    /* the messages cited by this text: the holders of what it contains */
    for (Py_ssize_t f = 0; f < found; f++) {
        Message *holder = &self->messages[self->patterns[self->found[f]].holder];
        if (holder->collected != self->scans) {
            holder->collected = self->scans;
            self->cited[cited++] = (int32_t)(holder - self->messages);
        }
    }
    for (Py_ssize_t c = 0; c < cited; c++) {
        Py_ssize_t i = self->cited[c];
        PyObject *quoted = PyList_New(0);
        if (quoted == NULL)
            goto error;
        for (int32_t id = self->messages[i].first; id >= 0; id = self->patterns[id].sibling) {
            if (self->patterns[id].found_in == self->scans && PyList_Append(quoted, self->patterns[id].string) < 0) {
                Py_DECREF(quoted);
                goto error;
            }
        }
        PyObject *entry = Py_BuildValue("(nN)", i, quoted);
        if (entry == NULL || PyList_Append(result, entry) < 0) {
            Py_XDECREF(entry);
            goto error;
        }
        Py_DECREF(entry);
    }
    for (Py_ssize_t c = 0; c < cited; c++)
        drop_message(self, self->cited[c]);
    self->messages[m].first = -1;
    self->messages[m].collected = 0;
    self->n_messages++;
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(strings); k++) {
        if (file_string(self, PyList_GET_ITEM(strings, k), m) < 0)
            goto error;
    }
    Py_DECREF(strings);
    return result;
error:
    /* MemoryError: the table stays consistent (citations not reported may be reported
     * by a later text, or the tracker rebuilt); the message counts as added */
    if (self->n_messages == m) {
        self->messages[m].first = -1;
        self->messages[m].collected = 0;
        self->n_messages++;
    }
    Py_DECREF(strings);
    Py_DECREF(result);
    return NULL;
}

static PyObject *
Scanner_strings(Scanner *self, PyObject *arg)
{
    Py_ssize_t m = PyLong_AsSsize_t(arg);
    if (m == -1 && PyErr_Occurred())
        return NULL;
    if (m < 0 || m >= self->n_messages) {
        PyErr_SetString(PyExc_IndexError, "no such message");
        return NULL;
    }
    PyObject *out = PyList_New(0);
    for (int32_t id = self->messages[m].first; out != NULL && id >= 0; id = self->patterns[id].sibling) {
        if (PyList_Append(out, self->patterns[id].string) < 0)
            Py_CLEAR(out);
    }
    if (out != NULL && PyList_Reverse(out) < 0)
        Py_CLEAR(out);
    return out;
}

static PyObject *
Scanner_get_messages(Scanner *self, void *closure)
{
    (void)closure;
    return PyLong_FromSsize_t(self->n_messages);
}

static PyObject *
Scanner_get_live(Scanner *self, void *closure)
{
    (void)closure;
    return PyLong_FromLong(self->live);
}

static PyObject *
Scanner_get_comparisons(Scanner *self, void *closure)
{
    (void)closure;
    return PyLong_FromUnsignedLongLong(self->comparisons);
}

static PyMethodDef Scanner_methods[] = {
    {"add", (PyCFunction)Scanner_add, METH_O,
     "add(text) -> list[(index, found)]: the earlier messages this text cites (each once, "
     "with those of its strings the text contains); then files the text's own strings."},
    {"strings", (PyCFunction)Scanner_strings, METH_O,
     "strings(index) -> list[str]: the strings of an uncited message ([] once cited)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Scanner_getset[] = {
    {"message_count", (getter)Scanner_get_messages, NULL, "messages added", NULL},
    {"live_strings", (getter)Scanner_get_live, NULL, "strings of uncited messages on file", NULL},
    {"comparisons", (getter)Scanner_get_comparisons, NULL, "in-place comparisons made", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ScannerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "opctx.context._refscan.Scanner",
    .tp_basicsize = sizeof(Scanner),
    .tp_dealloc = (destructor)Scanner_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Scanner(limit, stop_words): the reference tracker's table of uncited strings.",
    .tp_methods = Scanner_methods,
    .tp_getset = Scanner_getset,
    .tp_init = (initproc)Scanner_init,
    .tp_new = PyType_GenericNew,
};

/* ------------------------------------------------------------------ module */

static PyMethodDef methods[] = {
    {"extract", extract, METH_VARARGS,
     "extract(text, limit, stop_words) -> list[str]: extract_distinctive() in C."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_refscan", "Compiled core of opctx.context.references.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__refscan(void)
{
    init_classes();
    str_lower = PyUnicode_InternFromString("lower");
    if (str_lower == NULL || PyType_Ready(&ScannerType) < 0)
        return NULL;
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL)
        return NULL;
    Py_INCREF(&ScannerType);
    if (PyModule_AddObject(module, "Scanner", (PyObject *)&ScannerType) < 0) {
        Py_DECREF(&ScannerType);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
