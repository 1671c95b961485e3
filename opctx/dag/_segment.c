/* _segment: the compiled CJK segmentation of the full-text index (opctx.dag._search).
 *
 *   segment_cjk(text) -> str
 *       ``text`` with a zero-width space (U+200B) after every CJK character; ``text``
 *       itself (the same object) when it holds none.
 *
 * Why: FTS5's unicode61 tokenizer keeps a run of CJK characters as one token, so a
 * space after each character lets a query find any substring (see "CJK" in the
 * opctx.dag.store docstring). Every imported node's text goes through this, and the
 * regex split of the Python path (_search._segment_cjk_python) was about a tenth of the
 * CPU time of importing a large transcript; one pass that counts and one that copies
 * cost a fraction of it.
 *
 * The CJK class is the one of _search._CJK, code point for code point:
 *     U+3040-U+30FF (Hiragana, Katakana), U+3400-U+4DBF (CJK Extension A),
 *     U+4E00-U+9FFF (CJK Unified), U+F900-U+FAFF (Compatibility Ideographs),
 *     U+AC00-U+D7AF (Hangul syllables), U+20000-U+2FA1F (the ideographs of plane 2).
 * The Python path is the definition; tests/dag/test_segment.py compares the two on
 * arbitrary text and on each range's edges.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#if defined(__GNUC__)
#define ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define ALWAYS_INLINE inline
#endif

#define ZWSP 0x200B

static ALWAYS_INLINE int
is_cjk(Py_UCS4 c)
{
    if (c < 0x3040) /* most characters: one comparison */
        return 0;
    return c <= 0x30FF
        || (c >= 0x3400 && c <= 0x4DBF)
        || (c >= 0x4E00 && c <= 0x9FFF)
        || (c >= 0xF900 && c <= 0xFAFF)
        || (c >= 0xAC00 && c <= 0xD7AF)
        || (c >= 0x20000 && c <= 0x2FA1F);
}

/* The two passes for one string kind. Called with a constant ``kind`` so the compiler
 * makes one loop per kind, with no test of the kind per character. */
static ALWAYS_INLINE PyObject *
segment_kind(PyObject *text, int kind)
{
    const void *data = PyUnicode_DATA(text);
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    Py_ssize_t count = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        count += is_cjk(PyUnicode_READ(kind, data, i));
    if (count == 0)
        return Py_NewRef(text);
    if (count > PY_SSIZE_T_MAX - n) {
        PyErr_NoMemory();
        return NULL;
    }
    /* The result holds every character of ``text`` and a U+200B, so this is its true
     * largest character's kind: the string is canonical (equal strings, equal kinds). */
    Py_UCS4 maxchar = PyUnicode_MAX_CHAR_VALUE(text);
    PyObject *out = PyUnicode_New(n + count, maxchar > ZWSP ? maxchar : ZWSP);
    if (out == NULL)
        return NULL;
    int okind = PyUnicode_KIND(out);
    void *odata = PyUnicode_DATA(out);
    Py_ssize_t j = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        PyUnicode_WRITE(okind, odata, j, c);
        j++;
        if (is_cjk(c)) {
            PyUnicode_WRITE(okind, odata, j, ZWSP);
            j++;
        }
    }
    return out;
}

static PyObject *
segment_cjk(PyObject *module, PyObject *text)
{
    (void)module;
    if (!PyUnicode_Check(text)) {
        PyErr_Format(PyExc_TypeError, "segment_cjk() argument must be str, not %.200s",
                     Py_TYPE(text)->tp_name);
        return NULL;
    }
#if PY_VERSION_HEX < 0x030C0000
    if (PyUnicode_READY(text) < 0)
        return NULL;
#endif
    switch (PyUnicode_KIND(text)) {
    case PyUnicode_2BYTE_KIND:
        return segment_kind(text, PyUnicode_2BYTE_KIND);
    case PyUnicode_4BYTE_KIND:
        return segment_kind(text, PyUnicode_4BYTE_KIND);
    default: /* 1-byte strings stop at U+00FF, below every CJK character */
        return Py_NewRef(text);
    }
}

static PyMethodDef methods[] = {
    {"segment_cjk", segment_cjk, METH_O,
     "segment_cjk(text) -> str: text with U+200B after every CJK character (text itself "
     "when it has none)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_segment",
    "Compiled CJK segmentation of opctx.dag._search (the Python path is the definition).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__segment(void)
{
    return PyModule_Create(&module_def);
}
