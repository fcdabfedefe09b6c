/*
 * data.tokenization._fast_wordpiece: the compiled engine of tokenization.FastFullTokenizer.
 *
 * Engine(vocab, unk_id, max_input_chars_per_word, do_lower_case)
 *   vocab: dict str -> int (tokenization.load_vocab's result: a token listed
 *   twice already keeps its last id there). The engine keeps two hash tables
 *   of the entries' UTF-8 bytes: every entry as is (word-initial pieces), and
 *   the entries starting with "##" without that prefix (continuation pieces).
 *
 * Engine.encode_lines(lines, as_tokens) -> (out, rest)
 *   lines: a sequence of str / bytes. A line that is pure ASCII (a str whose
 *   characters are all < 128, or bytes all < 0x80, which decode to the same
 *   text with errors ignored) is tokenized here exactly as
 *   tokenization.FullTokenizer does on ASCII text:
 *     - cleaning: 0x00-0x08, 0x0B, 0x0C, 0x0E-0x1F and 0x7F are deleted (NUL,
 *       and the Cc characters other than tab, newline and CR); tab, newline,
 *       CR and space separate words (ASCII has no other Zs, no Cf, no CJK);
 *     - lower-casing (A-Z only: NFD is the identity on ASCII, and there is no
 *       Mn character to strip);
 *     - every printable ASCII non-alphanumeric (33-47, 58-64, 91-96, 123-126)
 *       is a token of its own; runs of alphanumerics are the other tokens;
 *     - WordPiece: greedy longest-match-first, continuation pieces looked up
 *       in the "##" table; a token of more than max_input_chars_per_word
 *       characters, or one with a part no piece matches, is a single unk_id.
 *   out[i] is line i's list of ids (as_tokens false) or of vocab tokens (the
 *   vocab's own str keys, as_tokens true); for any other line out[i] is None
 *   and i is listed in rest (a list of int), for the caller to tokenize.
 *
 * Engine.encode_line(line, as_tokens) -> list or None
 *   One line: out[0] of encode_lines([line], as_tokens).
 *
 * Engine.encode_token(token) -> list of int
 *   WordPiece of one basic token (any str) to ids, as
 *   WordpieceTokenizer.tokenize_word. Candidate pieces end on character
 *   boundaries of the token's UTF-8 form; characters are code points. A str
 *   that cannot be encoded (a lone surrogate) holds a character no vocab
 *   entry holds, so it is [unk_id].
 *
 * The GIL is held throughout; scratch buffers live in the engine object.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* Open addressing, linear probing; keys live in the engine's arena. */
typedef struct {
    uint32_t hash; /* low bits of the key's hash (the probe start comes from them too) */
    int32_t id;    /* -1: empty slot */
    uint32_t off;  /* the key: arena[off : off + len] */
    uint32_t len;
} Slot;

typedef struct {
    Slot *slots;
    const unsigned char *arena;
    size_t mask;
    Py_ssize_t maxlen; /* longest key, in bytes */
} Table;

/* FNV-1a, byte by byte: the hash of p[0:n] extends the hash of p[0:n-1]. */
#define FNV_BASIS 1469598103934665603ULL
#define FNV_STEP(h, byte) (((h) ^ (byte)) * 1099511628211ULL)
static inline uint32_t hash_final(uint64_t h) { return (uint32_t)(h ^ (h >> 32)); }

static inline uint32_t hash_bytes(const unsigned char *p, Py_ssize_t n) {
    uint64_t h = FNV_BASIS;
    for (Py_ssize_t i = 0; i < n; i++) h = FNV_STEP(h, p[i]);
    return hash_final(h);
}

static int table_init(Table *t, Py_ssize_t n, const unsigned char *arena) {
    size_t cap = 16;
    while (cap < (size_t)n * 2 + 2) cap <<= 1;
    t->slots = (Slot *)PyMem_Malloc(cap * sizeof(Slot));
    if (t->slots == NULL) return -1;
    for (size_t i = 0; i < cap; i++) t->slots[i].id = -1;
    t->arena = arena;
    t->mask = cap - 1;
    t->maxlen = 0;
    return 0;
}

static inline int key_eq(const unsigned char *a, const unsigned char *b, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++)
        if (a[i] != b[i]) return 0;
    return 1;
}

/* The id of key[0:len] (hash h), or -1. */
static inline int32_t table_find(const Table *t, const unsigned char *key, Py_ssize_t len,
                                 uint32_t h) {
    size_t i = (size_t)h & t->mask;
    for (;;) {
        const Slot *s = &t->slots[i];
        if (s->id < 0) return -1;
        if (s->hash == h && (Py_ssize_t)s->len == len && key_eq(t->arena + s->off, key, len))
            return s->id;
        i = (i + 1) & t->mask;
    }
}

/* Adds arena[off:off+len] -> id (a key already present takes the new id). */
static void table_put(Table *t, uint32_t off, Py_ssize_t len, int32_t id) {
    const unsigned char *key = t->arena + off;
    uint32_t h = hash_bytes(key, len);
    size_t i = (size_t)h & t->mask;
    for (;;) {
        Slot *s = &t->slots[i];
        if (s->id < 0) break;
        if (s->hash == h && (Py_ssize_t)s->len == len && key_eq(t->arena + s->off, key, len)) {
            s->id = id;
            return;
        }
        i = (i + 1) & t->mask;
    }
    t->slots[i].hash = h;
    t->slots[i].id = id;
    t->slots[i].off = off;
    t->slots[i].len = (uint32_t)len;
    if (len > t->maxlen) t->maxlen = len;
}

typedef struct {
    PyObject_HEAD
    Table full;     /* every vocab entry */
    Table suffix;   /* entries "##x", stored as "x" */
    unsigned char *arena;
    int32_t unk_id;
    Py_ssize_t max_chars;
    int lower;
    Py_ssize_t n_ids;    /* largest id + 1 */
    PyObject **id_objs;  /* id -> int object (NULL for ids no entry has) */
    PyObject **tok_objs; /* id -> the vocab's str key */
    unsigned char *buf;  /* scratch: the current token */
    Py_ssize_t buf_cap;
    int32_t *ids;        /* scratch: the current line's ids */
    Py_ssize_t ids_len, ids_cap;
} Engine;

/* Character classes of ASCII bytes for the line scan. */
enum { C_DROP = 0, C_SPACE = 1, C_PUNCT = 2, C_ALNUM = 3 };
static unsigned char ascii_class[128];

static void init_classes(void) {
    for (int c = 0; c < 128; c++) {
        unsigned char k;
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') k = C_SPACE;
        else if (c < 32 || c == 127) k = C_DROP;
        else if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
                 (c >= 123 && c <= 126)) k = C_PUNCT;
        else k = C_ALNUM;
        ascii_class[c] = k;
    }
}

static int push_id(Engine *e, int32_t id) {
    if (e->ids_len == e->ids_cap) {
        Py_ssize_t cap = e->ids_cap ? e->ids_cap * 2 : 256;
        int32_t *p = (int32_t *)PyMem_Realloc(e->ids, (size_t)cap * sizeof(int32_t));
        if (p == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        e->ids = p;
        e->ids_cap = cap;
    }
    e->ids[e->ids_len++] = id;
    return 0;
}

static inline int is_cont(unsigned char b) { return (b & 0xC0) == 0x80; }

/* Candidate spans up to this many bytes share one hashing pass. */
#define HASH_WINDOW 64

/* Appends the WordPiece ids of token p[0:n] (valid UTF-8; ascii: all bytes < 128). */
static int wordpiece(Engine *e, const unsigned char *p, Py_ssize_t n, int ascii) {
    Py_ssize_t nchars = n;
    if (!ascii) {
        nchars = 0;
        for (Py_ssize_t i = 0; i < n; i++) nchars += !is_cont(p[i]);
    }
    if (nchars > e->max_chars) return push_id(e, e->unk_id);
    Py_ssize_t mark = e->ids_len, start = 0;
    uint64_t prefix[HASH_WINDOW + 1]; /* prefix[k]: FNV state of p[start:start+k] */
    while (start < n) {
        const Table *t = start ? &e->suffix : &e->full;
        Py_ssize_t end = start + t->maxlen;
        if (end > n) end = n;
        while (end > start && end < n && is_cont(p[end])) end--;
        /* Candidates p[start:end'] for end' from end down (character boundaries
           only), longest first; their hashes are prefixes of one FNV pass. */
        Py_ssize_t span = end - start;
        int windowed = span <= HASH_WINDOW;
        if (windowed) {
            uint64_t h = FNV_BASIS;
            prefix[0] = h;
            for (Py_ssize_t k = 0; k < span; k++) prefix[k + 1] = h = FNV_STEP(h, p[start + k]);
        }
        int32_t id = -1;
        while (end > start) {
            Py_ssize_t len = end - start;
            uint32_t h = windowed ? hash_final(prefix[len]) : hash_bytes(p + start, len);
            id = table_find(t, p + start, len, h);
            if (id >= 0) break;
            end--;
            while (end > start && is_cont(p[end])) end--;
        }
        if (id < 0) {
            e->ids_len = mark;
            return push_id(e, e->unk_id);
        }
        if (push_id(e, id) < 0) return -1;
        start = end;
    }
    return 0;
}

static int ensure_buf(Engine *e, Py_ssize_t n) {
    if (n <= e->buf_cap) return 0;
    Py_ssize_t cap = e->buf_cap ? e->buf_cap : 256;
    while (cap < n) cap *= 2;
    unsigned char *p = (unsigned char *)PyMem_Realloc(e->buf, (size_t)cap);
    if (p == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    e->buf = p;
    e->buf_cap = cap;
    return 0;
}

/* Tokenizes one ASCII line s[0:n] into e->ids (reset first). */
static int encode_ascii_line(Engine *e, const unsigned char *s, Py_ssize_t n) {
    e->ids_len = 0;
    if (ensure_buf(e, n) < 0) return -1;
    unsigned char *buf = e->buf;
    const int lower = e->lower;
    Py_ssize_t k = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        switch (ascii_class[c]) {
        case C_ALNUM:
            if (lower && c >= 'A' && c <= 'Z') c += 32;
            buf[k++] = c;
            break;
        case C_SPACE:
            if (k) {
                if (wordpiece(e, buf, k, 1) < 0) return -1;
                k = 0;
            }
            break;
        case C_PUNCT:
            if (k) {
                if (wordpiece(e, buf, k, 1) < 0) return -1;
                k = 0;
            }
            if (wordpiece(e, &c, 1, 1) < 0) return -1;
            break;
        default: /* C_DROP: deleted, the characters around it stay joined */
            break;
        }
    }
    if (k && wordpiece(e, buf, k, 1) < 0) return -1;
    return 0;
}

/* A new list of the objects of e->ids[0:ids_len]. */
static PyObject *ids_to_list(Engine *e, int as_tokens) {
    PyObject **objs = as_tokens ? e->tok_objs : e->id_objs;
    PyObject *list = PyList_New(e->ids_len);
    if (list == NULL) return NULL;
    for (Py_ssize_t j = 0; j < e->ids_len; j++) {
        PyObject *o = objs[e->ids[j]];
        Py_INCREF(o);
        PyList_SET_ITEM(list, j, o);
    }
    return list;
}

static int ascii_bytes(const unsigned char *p, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++)
        if (p[i] & 0x80) return 0;
    return 1;
}

/* Sets *p and *len to the text of an ASCII str or bytes line: 1; another line: 0; error: -1. */
static int ascii_text(PyObject *item, const unsigned char **p, Py_ssize_t *len) {
    if (PyUnicode_Check(item)) {
#if PY_VERSION_HEX < 0x030C0000
        if (PyUnicode_READY(item) < 0) return -1;
#endif
        if (!PyUnicode_IS_ASCII(item)) return 0;
        *p = (const unsigned char *)PyUnicode_DATA(item);
        *len = PyUnicode_GET_LENGTH(item);
        return 1;
    }
    if (PyBytes_Check(item)) {
        const unsigned char *b = (const unsigned char *)PyBytes_AS_STRING(item);
        Py_ssize_t n = PyBytes_GET_SIZE(item);
        if (!ascii_bytes(b, n)) return 0;
        *p = b;
        *len = n;
        return 1;
    }
    return 0;
}

static PyObject *Engine_encode_line(Engine *e, PyObject *args) {
    PyObject *line;
    int as_tokens = 0;
    if (!PyArg_ParseTuple(args, "O|p:encode_line", &line, &as_tokens)) return NULL;
    const unsigned char *p = NULL;
    Py_ssize_t len = 0;
    int r = ascii_text(line, &p, &len);
    if (r < 0) return NULL;
    if (r == 0) Py_RETURN_NONE;
    if (encode_ascii_line(e, p, len) < 0) return NULL;
    return ids_to_list(e, as_tokens);
}

static PyObject *Engine_encode_lines(Engine *e, PyObject *args) {
    PyObject *lines;
    int as_tokens = 0;
    if (!PyArg_ParseTuple(args, "O|p:encode_lines", &lines, &as_tokens)) return NULL;
    PyObject *seq = PySequence_Fast(lines, "encode_lines: lines must be a sequence");
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    PyObject *out = PyList_New(n);
    PyObject *rest = PyList_New(0);
    if (out == NULL || rest == NULL) goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = items[i];
        const unsigned char *p = NULL;
        Py_ssize_t len = 0;
        int r = ascii_text(item, &p, &len);
        if (r < 0) goto fail;
        if (r == 0) {
            PyObject *idx = PyLong_FromSsize_t(i);
            if (idx == NULL) goto fail;
            int r = PyList_Append(rest, idx);
            Py_DECREF(idx);
            if (r < 0) goto fail;
            Py_INCREF(Py_None);
            PyList_SET_ITEM(out, i, Py_None);
            continue;
        }
        if (encode_ascii_line(e, p, len) < 0) goto fail;
        PyObject *row = ids_to_list(e, as_tokens);
        if (row == NULL) goto fail;
        PyList_SET_ITEM(out, i, row);
    }
    Py_DECREF(seq);
    PyObject *result = PyTuple_Pack(2, out, rest);
    Py_DECREF(out);
    Py_DECREF(rest);
    return result;
fail:
    Py_DECREF(seq);
    Py_XDECREF(out);
    Py_XDECREF(rest);
    return NULL;
}

static PyObject *Engine_encode_token(Engine *e, PyObject *token) {
    if (!PyUnicode_Check(token)) {
        PyErr_SetString(PyExc_TypeError, "encode_token: token must be a str");
        return NULL;
    }
    Py_ssize_t len;
    const char *p = PyUnicode_AsUTF8AndSize(token, &len);
    e->ids_len = 0;
    if (p == NULL) { /* a lone surrogate: no vocab entry holds one */
        PyErr_Clear();
        if (push_id(e, e->unk_id) < 0) return NULL;
    } else if (wordpiece(e, (const unsigned char *)p, len, PyUnicode_IS_ASCII(token)) < 0) {
        return NULL;
    }
    return ids_to_list(e, 0);
}

static void Engine_dealloc(Engine *e) {
    if (e->id_objs != NULL) {
        for (Py_ssize_t i = 0; i < e->n_ids; i++) {
            Py_XDECREF(e->id_objs[i]);
            Py_XDECREF(e->tok_objs[i]);
        }
    }
    PyMem_Free(e->id_objs);
    PyMem_Free(e->tok_objs);
    PyMem_Free(e->full.slots);
    PyMem_Free(e->suffix.slots);
    PyMem_Free(e->arena);
    PyMem_Free(e->buf);
    PyMem_Free(e->ids);
    Py_TYPE(e)->tp_free((PyObject *)e);
}

static int Engine_init(Engine *e, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"vocab", "unk_id", "max_input_chars_per_word", "do_lower_case", NULL};
    PyObject *vocab;
    int unk_id;
    Py_ssize_t max_chars;
    int lower;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!inp:Engine", kwlist, &PyDict_Type, &vocab,
                                     &unk_id, &max_chars, &lower))
        return -1;
    if (e->arena != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Engine: already initialized");
        return -1;
    }
    e->unk_id = unk_id;
    e->max_chars = max_chars;
    e->lower = lower;
    /* First pass: sizes, ids, and the largest id. */
    Py_ssize_t pos = 0, total = 0, n_suffix = 0, max_id = unk_id;
    PyObject *key, *value;
    while (PyDict_Next(vocab, &pos, &key, &value)) {
        if (!PyUnicode_Check(key) || !PyLong_Check(value)) {
            PyErr_SetString(PyExc_TypeError, "Engine: vocab must map str to int");
            return -1;
        }
        Py_ssize_t len;
        const char *u = PyUnicode_AsUTF8AndSize(key, &len);
        if (u == NULL) return -1;
        long id = PyLong_AsLong(value);
        if (id == -1 && PyErr_Occurred()) return -1;
        if (id < 0 || id > INT32_MAX - 1) {
            PyErr_SetString(PyExc_ValueError, "Engine: vocab ids must be in [0, 2**31 - 1)");
            return -1;
        }
        if (id > max_id) max_id = id;
        total += len;
        if (len >= 2 && u[0] == '#' && u[1] == '#') n_suffix++;
    }
    if (unk_id < 0) {
        PyErr_SetString(PyExc_ValueError, "Engine: unk_id must be a vocab id");
        return -1;
    }
    Py_ssize_t n = PyDict_GET_SIZE(vocab);
    e->n_ids = max_id + 1;
    e->arena = (unsigned char *)PyMem_Malloc((size_t)total + 1);
    e->id_objs = (PyObject **)PyMem_Calloc((size_t)e->n_ids, sizeof(PyObject *));
    e->tok_objs = (PyObject **)PyMem_Calloc((size_t)e->n_ids, sizeof(PyObject *));
    if (e->arena == NULL || e->id_objs == NULL || e->tok_objs == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    if (total > (Py_ssize_t)UINT32_MAX - 1) {
        PyErr_SetString(PyExc_ValueError, "Engine: vocab entries over 4 GB in all");
        return -1;
    }
    if (table_init(&e->full, n, e->arena) < 0 || table_init(&e->suffix, n_suffix, e->arena) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    /* Second pass: keys into the arena and the tables; the id and str objects. */
    unsigned char *a = e->arena;
    pos = 0;
    while (PyDict_Next(vocab, &pos, &key, &value)) {
        Py_ssize_t len;
        const char *u = PyUnicode_AsUTF8AndSize(key, &len);
        if (u == NULL) return -1;
        long id = PyLong_AsLong(value);
        uint32_t off = (uint32_t)(a - e->arena);
        memcpy(a, u, (size_t)len);
        table_put(&e->full, off, len, (int32_t)id);
        if (len >= 2 && a[0] == '#' && a[1] == '#') table_put(&e->suffix, off + 2, len - 2, (int32_t)id);
        a += len;
        Py_INCREF(value);
        Py_XSETREF(e->id_objs[id], value);
        Py_INCREF(key);
        Py_XSETREF(e->tok_objs[id], key);
    }
    if (e->id_objs[unk_id] == NULL) {
        PyErr_SetString(PyExc_ValueError, "Engine: unk_id must be a vocab id");
        return -1;
    }
    return 0;
}

static PyMethodDef Engine_methods[] = {
    {"encode_lines", (PyCFunction)Engine_encode_lines, METH_VARARGS,
     "encode_lines(lines, as_tokens=False) -> (out, rest): ASCII lines tokenized, others listed."},
    {"encode_line", (PyCFunction)Engine_encode_line, METH_VARARGS,
     "encode_line(line, as_tokens=False) -> list, or None for a line that is not ASCII."},
    {"encode_token", (PyCFunction)Engine_encode_token, METH_O,
     "encode_token(token) -> list of int: WordPiece ids of one basic token."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject EngineType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "data.tokenization._fast_wordpiece.Engine",
    .tp_basicsize = sizeof(Engine),
    .tp_dealloc = (destructor)Engine_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Engine(vocab, unk_id, max_input_chars_per_word, do_lower_case): compiled WordPiece.",
    .tp_methods = Engine_methods,
    .tp_init = (initproc)Engine_init,
    .tp_new = PyType_GenericNew,
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "data.tokenization._fast_wordpiece",
    "Compiled engine of tokenization.FastFullTokenizer (ASCII lines, WordPiece).", -1, NULL,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__fast_wordpiece(void) {
    init_classes();
    if (PyType_Ready(&EngineType) < 0) return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (m == NULL) return NULL;
    Py_INCREF(&EngineType);
    if (PyModule_AddObject(m, "Engine", (PyObject *)&EngineType) < 0) {
        Py_DECREF(&EngineType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
