/* One pass over an instance's JSON text that takes its compact throughput tables out.
 *
 * strip(source, limit=-1, slice=SLICE) reads the text (an open file's descriptor, read slice bytes at a
 * time up to its end, or a bytes-like object) and gives (rest, counts, tflops, tables, colons, brackets, length):
 *   rest      the text with JSON's whitespace outside strings dropped (one space kept where two
 *             tokens would otherwise touch) and the contents of every array that is the value of
 *             "counts" or "tflops" in jobs[k].throughput.compact left out: each such array is
 *             written as [] (a bytearray, for a strict JSON parser to read);
 *   counts    the int64 entries of the "counts" arrays, end to end (a bytearray);
 *   tflops    the float64 entries of the "tflops" arrays, end to end (a bytearray);
 *   tables    (kind, first entry, entries) as int64 triples, one per array left out, in the text's
 *             order (kind 0 counts, 1 tflops);
 *   colons, brackets  the colons and opening brackets of the text outside strings;
 *   length    the bytes read.
 * or None when the text is not for this pass: a table array that is empty or holds other than
 * numbers of JSON's grammar of at most MAX_TOKEN characters (counts: integer literals of 64 bits;
 * tflops: any number, read as the nearest double, none that overflows; an integer literal -0 is 0),
 * a first byte but whitespace that is not a brace, nesting deeper than MAX_NESTING, a text that ends
 * inside a string or a table, or one of more than limit bytes (when limit is not negative). Nothing
 * else is checked here: the rest is for the strict parser to refuse or accept, and a caller that finds the tables at other
 * places than this pass did reads the text another way. Every string is copied byte for byte (a
 * quote after a backslash does not end it); a key is compared only when written without escapes.
 *
 * A double is the correctly rounded value of its literal: exactly w * 10^e or w / 10^-e when the
 * literal's digits w are at most 2^53 and |e| <= 22 (both exact doubles, one rounding), else
 * a correctly rounded conversion: the C library's strtod_l in the C locale with glibc, else Python's
 * (PyOS_string_to_double). The scan runs without the GIL (taken back only to grow an output, or for
 * Python's conversion), so other threads go on while a file is read.
 */
#define _GNU_SOURCE
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#if defined(__GLIBC__)
#include <locale.h>
#include <stdlib.h>
#define SCAN_STRTOD
static locale_t c_numeric; /* the C locale's numbers (a dot before the fraction) */
#endif

#define MAX_NESTING 64          /* as the readers' MAX_DEPTH */
#define SLICE (1 << 20)         /* bytes read from a file at once (strip's third argument) */
#define MAX_TOKEN 64            /* a longer number in a table is not for this pass */
#define KEY_BYTES 12            /* keys compared: at most this long */

enum tag { OTHER, ROOT, JOBS, JOB, THROUGHPUT, COMPACT };
enum key { K_NONE, K_JOBS, K_THROUGHPUT, K_COMPACT, K_COUNTS, K_TFLOPS };
enum mode { M_TOKENS, M_STRING, M_STRING_ESCAPE, M_SCALAR, M_TABLE_EXPECT, M_TABLE_NUMBER, M_TABLE_AFTER };

typedef struct {
    PyObject *obj;  /* a bytearray */
    char *data;
    Py_ssize_t len, cap;
    PyThreadState **released; /* the scan's saved thread state while it runs without the GIL */
} Out;

typedef struct {
    Out rest, counts, tflops, tables;
    PyThreadState *released;
    int mode;
    int depth;
    unsigned char is_object[MAX_NESTING + 2];
    unsigned char tag[MAX_NESTING + 2];
    int key;             /* the key whose value comes next (after its colon), in an object */
    int last_string;     /* the last string closed at this level, as a key */
    int string_is_key;   /* the open string was written where a key may be */
    char key_text[KEY_BYTES + 1];
    int key_len, key_escaped;
    int skipped_space;   /* whitespace dropped since the last byte written */
    int started;
    int table_kind;      /* 0 counts, 1 tflops */
    int64_t table_first, table_entries;
    char token[MAX_TOKEN + 1];
    int token_len;
    long long colons, brackets, length;
} Scan;

static int out_init(Out *o, Py_ssize_t cap, PyThreadState **released)
{
    o->obj = PyByteArray_FromStringAndSize(NULL, cap);
    if (!o->obj)
        return -1;
    o->data = PyByteArray_AS_STRING(o->obj);
    o->len = 0;
    o->cap = cap;
    o->released = released;
    return 0;
}

/* Room for more bytes: the bytearray doubled (the GIL taken for it when the scan runs without). */
static int out_grow(Out *o, Py_ssize_t more)
{
    if (o->len + more <= o->cap)
        return 0;
    Py_ssize_t cap = o->cap * 2;
    while (cap < o->len + more)
        cap *= 2;
    if (*o->released)
        PyEval_RestoreThread(*o->released);
    int failed = PyByteArray_Resize(o->obj, cap) < 0;
    if (*o->released)
        *o->released = PyEval_SaveThread();
    if (failed)
        return -1;
    o->data = PyByteArray_AS_STRING(o->obj);
    o->cap = cap;
    return 0;
}

static inline int out_byte(Out *o, char c)
{
    if (o->len == o->cap && out_grow(o, 1) < 0)
        return -1;
    o->data[o->len++] = c;
    return 0;
}

static inline int out_bytes(Out *o, const void *p, Py_ssize_t n)
{
    if (out_grow(o, n) < 0)
        return -1;
    memcpy(o->data + o->len, p, n);
    o->len += n;
    return 0;
}

static inline int out_i64(Out *o, int64_t v) { return out_bytes(o, &v, 8); }
static inline int out_f64(Out *o, double v) { return out_bytes(o, &v, 8); }

static void out_free(Out *o)
{
    Py_CLEAR(o->obj);
}

static int is_ws(unsigned char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }
static int is_structural(unsigned char c)
{
    return c == ',' || c == ':' || c == '[' || c == ']' || c == '{' || c == '}';
}
static int is_number_byte(unsigned char c)
{
    return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E';
}

/* The first byte at or after p that is not JSON whitespace (end when none): sixteen bytes at a
 * time where SSE2 is there (the indentation of a pretty-printed text is most of its bytes). */
static inline const char *skip_ws(const char *p, const char *end)
{
#ifdef __SSE2__
    const __m128i space = _mm_set1_epi8(' '), newline = _mm_set1_epi8('\n');
    const __m128i ret = _mm_set1_epi8('\r'), tab = _mm_set1_epi8('\t');
    while (end - p >= 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)p);
        __m128i ws = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, space), _mm_cmpeq_epi8(v, newline)),
                                  _mm_or_si128(_mm_cmpeq_epi8(v, ret), _mm_cmpeq_epi8(v, tab)));
        unsigned other = ~(unsigned)_mm_movemask_epi8(ws) & 0xFFFFu;
        if (other)
            return p + __builtin_ctz(other);
        p += 16;
    }
#endif
    while (p < end && is_ws((unsigned char)*p))
        p++;
    return p;
}

static int classify_key(const Scan *s)
{
    if (s->key_escaped || s->key_len > KEY_BYTES)
        return K_NONE;
#define IS(word) (s->key_len == (int)sizeof(word) - 1 && memcmp(s->key_text, word, sizeof(word) - 1) == 0)
    if (IS("jobs")) return K_JOBS;
    if (IS("throughput")) return K_THROUGHPUT;
    if (IS("compact")) return K_COMPACT;
    if (IS("counts")) return K_COUNTS;
    if (IS("tflops")) return K_TFLOPS;
#undef IS
    return K_NONE;
}

static const double POW10[23] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
                                 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* Whether the eight bytes of x (in memory order, little-endian) are all ASCII digits. */
static inline int eight_digits(uint64_t x)
{
    return (((x & UINT64_C(0xF0F0F0F0F0F0F0F0)) | (((x + UINT64_C(0x0606060606060606)) & UINT64_C(0xF0F0F0F0F0F0F0F0)) >> 4))
            == UINT64_C(0x3333333333333333));
}

/* The value of eight ASCII digits (the first in memory the most significant), little-endian. */
static inline uint64_t eight_digits_value(uint64_t x)
{
    x = (x & UINT64_C(0x0F0F0F0F0F0F0F0F)) * 2561 >> 8;
    x = (x & UINT64_C(0x00FF00FF00FF00FF)) * 6553601 >> 16;
    return (x & UINT64_C(0x0000FFFF0000FFFF)) * UINT64_C(42949672960001) >> 32;
}

/* The table entry whose literal starts at p (and ends at *stop, before end): 1 when it was written to
 * the counts or the TFLOP/s, 0 when it is not for this pass (not a number of JSON's grammar, longer
 * than MAX_TOKEN, or not of the table's kind), -1 on a Python error (memory). */
static int table_number(Scan *s, const char *p, const char *end, const char **stop)
{
    const char *q = p;
    int negative = 0;
    if (q < end && *q == '-') {
        negative = 1;
        q++;
    }
    if (q == end || *q < '0' || *q > '9')
        return 0;
    /* value = w * 10^(exponent + shift - fraction), exactly unless inexact */
    uint64_t w = 0;
    int kept = 0, shift = 0, fraction = 0, inexact = 0, is_integer = 1;
    if (*q == '0') {
        q++;
    } else {
        for (; q < end && *q >= '0' && *q <= '9'; q++) {
            if (kept < 19) {
                w = w * 10 + (uint64_t)(*q - '0');
                kept++;
            } else {
                shift++;
                inexact |= *q != '0';
            }
        }
    }
    if (q < end && *q == '.') {
        is_integer = 0;
        q++;
        if (q == end || *q < '0' || *q > '9')
            return 0;
        if (w && kept <= 11) /* eight digits at once while they fit in w's 19 */
            while (end - q >= 8) {
                uint64_t eight;
                memcpy(&eight, q, 8);
                if (!eight_digits(eight))
                    break;
                w = w * 100000000 + eight_digits_value(eight);
                kept += 8;
                fraction += 8;
                q += 8;
                if (kept > 11)
                    break;
            }
        for (; q < end && *q >= '0' && *q <= '9'; q++) {
            if (kept < 19) {
                w = w * 10 + (uint64_t)(*q - '0');
                fraction++;
                if (w)
                    kept++;
            } else {
                inexact |= *q != '0';
            }
        }
    }
    int64_t exponent = 0;
    if (q < end && (*q == 'e' || *q == 'E')) {
        is_integer = 0;
        q++;
        int exp_negative = 0;
        if (q < end && (*q == '+' || *q == '-')) {
            exp_negative = *q == '-';
            q++;
        }
        if (q == end || *q < '0' || *q > '9')
            return 0;
        for (; q < end && *q >= '0' && *q <= '9'; q++)
            if (exponent < 100000)
                exponent = exponent * 10 + (*q - '0');
        if (exp_negative)
            exponent = -exponent;
    }
    *stop = q;
    int n = (int)(q - p);
    if (n > MAX_TOKEN)
        return 0;
    if (s->table_kind == 0) { /* counts: an integer literal of 64 bits */
        if (!is_integer || shift || w > (uint64_t)INT64_MAX + (uint64_t)negative)
            return 0;
        return out_i64(&s->counts, negative ? (int64_t)(0 - w) : (int64_t)w) < 0 ? -1 : 1;
    }
    double v;
    int64_t e10 = exponent + shift - fraction;
    if (!inexact && w <= (UINT64_C(1) << 53) && e10 >= -22 && e10 <= 22) {
        v = (double)w;
        v = e10 < 0 ? v / POW10[-e10] : v * POW10[e10];
        if (negative && !(is_integer && w == 0)) /* (an integer literal is an int first: -0 is 0) */
            v = -v;
    } else {
        char text[MAX_TOKEN + 1];
        char *read = NULL;
        memcpy(text, p, n);
        text[n] = 0;
#ifdef SCAN_STRTOD
        v = strtod_l(text, &read, c_numeric); /* glibc's: correctly rounded, no GIL needed */
#else
        if (s->released)
            PyEval_RestoreThread(s->released);
        v = PyOS_string_to_double(text, &read, NULL);
        int failed = v == -1.0 && PyErr_Occurred();
        if (failed)
            PyErr_Clear();
        if (s->released)
            s->released = PyEval_SaveThread();
        if (failed)
            return 0;
#endif
        if (read != text + n || v - v != 0.0) /* (or overflowed to infinity: w * 10^e above can not) */
            return 0;
    }
    return out_f64(&s->tflops, v) < 0 ? -1 : 1;
}

static int table_end(Scan *s)
{
    if (!s->table_entries)
        return 0;
    if (out_i64(&s->tables, s->table_kind) < 0 || out_i64(&s->tables, s->table_first) < 0
            || out_i64(&s->tables, s->table_entries) < 0 || out_bytes(&s->rest, "[]", 2) < 0)
        return -1;
    s->mode = M_TOKENS;
    return 1;
}

/* Opens a container at the next level; 0 when nested too deeply. */
static int open_level(Scan *s, int is_object)
{
    if (s->depth >= MAX_NESTING)
        return 0;
    int parent = s->depth ? s->tag[s->depth] : -1;
    int tag = OTHER;
    if (parent < 0)
        tag = is_object ? ROOT : OTHER;
    else if (parent == ROOT && !is_object && s->key == K_JOBS)
        tag = JOBS;
    else if (parent == JOBS && is_object)
        tag = JOB;
    else if (parent == JOB && is_object && s->key == K_THROUGHPUT)
        tag = THROUGHPUT;
    else if (parent == THROUGHPUT && is_object && s->key == K_COMPACT)
        tag = COMPACT;
    s->depth++;
    s->is_object[s->depth] = (unsigned char)is_object;
    s->tag[s->depth] = (unsigned char)tag;
    s->key = K_NONE;
    s->last_string = K_NONE;
    return 1;
}

/* Feeds p[0..n) to the scan: 1 to go on, 0 when the text is not for this pass, -1 on a Python error. */
static int feed(Scan *s, const char *p, Py_ssize_t n)
{
    const char *end = p + n;
    s->length += n;
    while (p < end) {
        unsigned char c;
        switch (s->mode) {
        case M_STRING: { /* copied byte for byte up to the unescaped quote */
            const char *q = p;
            while (q < end && *q != '"' && *q != '\\')
                q++;
            if (s->string_is_key) { /* the first KEY_BYTES bytes, and whether there were more */
                Py_ssize_t k = q - p, room = KEY_BYTES + 1 - s->key_len;
                if (k > room)
                    k = room;
                if (k > 0) {
                    memcpy(s->key_text + s->key_len, p, k);
                    s->key_len += (int)k;
                }
            }
            if (out_bytes(&s->rest, p, q - p) < 0)
                return -1;
            p = q;
            if (p == end)
                break;
            if (out_byte(&s->rest, *p) < 0)
                return -1;
            if (*p == '\\') {
                s->key_escaped = 1;
                s->mode = M_STRING_ESCAPE;
            } else {
                s->mode = M_TOKENS;
                s->last_string = s->string_is_key ? classify_key(s) : K_NONE;
            }
            p++;
            break;
        }
        case M_STRING_ESCAPE:
            if (out_byte(&s->rest, *p) < 0)
                return -1;
            p++;
            s->mode = M_STRING;
            break;
        case M_SCALAR: /* a number or a literal outside the tables: copied, the parser reads it */
            c = (unsigned char)*p;
            if (is_ws(c) || is_structural(c) || c == '"') {
                s->mode = M_TOKENS;
                break;
            }
            if (out_byte(&s->rest, (char)c) < 0)
                return -1;
            p++;
            break;
        case M_TABLE_EXPECT: /* after [ or a comma: a number */
            /* the usual case, a slice with room for the next number: the table read in this loop */
            while (end - p > MAX_TOKEN + 1) {
                p = skip_ws(p, end);
                if (end - p <= MAX_TOKEN + 1)
                    break;
                c = (unsigned char)*p;
                if (c == ']' && s->table_entries == 0)
                    return 0; /* an empty table */
                const char *q;
                int r = table_number(s, p, end, &q);
                if (r <= 0)
                    return r;
                if (is_number_byte((unsigned char)*q))
                    return 0;
                s->table_entries++;
                p = skip_ws(q, end);
                if (p == end) {
                    s->mode = M_TABLE_AFTER;
                    break;
                }
                c = (unsigned char)*p++;
                if (c == ']') {
                    r = table_end(s);
                    if (r <= 0)
                        return r;
                    break;
                }
                if (c != ',')
                    return 0;
            }
            if (s->mode != M_TABLE_EXPECT || p == end)
                break;
            p = skip_ws(p, end);
            if (p == end)
                break;
            c = (unsigned char)*p;
            if (c == ']' && s->table_entries == 0)
                return 0; /* an empty table */
            if (c != '-' && (c < '0' || c > '9'))
                return 0;
            s->token_len = 0;
            s->mode = M_TABLE_NUMBER;
            /* fall through */
        case M_TABLE_NUMBER: { /* a number that a slice's end may cut: its bytes gathered first */
            const char *q = p;
            while (q < end && is_number_byte((unsigned char)*q))
                q++;
            if (s->token_len + (q - p) > MAX_TOKEN)
                return 0;
            memcpy(s->token + s->token_len, p, q - p);
            s->token_len += (int)(q - p);
            p = q;
            if (q == end) /* the number may go on in the next slice */
                break;
            const char *stop;
            int r = table_number(s, s->token, s->token + s->token_len, &stop);
            if (r <= 0)
                return r;
            if (stop != s->token + s->token_len)
                return 0;
            s->token_len = 0;
            s->table_entries++;
            s->mode = M_TABLE_AFTER;
            break;
        }
        case M_TABLE_AFTER: /* after a number: a comma or the end of the table */
            p = skip_ws(p, end);
            if (p == end)
                break;
            c = (unsigned char)*p;
            p++;
            if (c == ',') {
                s->mode = M_TABLE_EXPECT;
                break;
            }
            if (c == ']') {
                int r = table_end(s);
                if (r <= 0)
                    return r;
                break;
            }
            return 0;
        default: /* M_TOKENS: between tokens */
            c = (unsigned char)*p;
            if (is_ws(c)) {
                p = skip_ws(p, end);
                s->skipped_space = 1;
                break;
            }
            if (!s->started) {
                if (c != '{')
                    return 0;
                s->started = 1;
            }
            if (s->skipped_space) {
                s->skipped_space = 0;
                char prev = s->rest.len ? s->rest.data[s->rest.len - 1] : ',';
                if (!is_structural((unsigned char)prev) && !is_structural(c)
                        && out_byte(&s->rest, ' ') < 0)
                    return -1;
            }
            p++;
            int in_object = s->depth && s->is_object[s->depth];
            switch (c) {
            case '"':
                s->string_is_key = in_object;
                s->key_len = 0;
                s->key_escaped = 0;
                s->mode = M_STRING;
                if (out_byte(&s->rest, '"') < 0)
                    return -1;
                continue;
            case ':':
                s->colons++;
                if (in_object)
                    s->key = s->last_string;
                s->last_string = K_NONE;
                break;
            case ',':
                s->key = K_NONE;
                s->last_string = K_NONE;
                break;
            case '[':
                s->brackets++;
                if (s->depth && s->tag[s->depth] == COMPACT && (s->key == K_COUNTS || s->key == K_TFLOPS)) {
                    s->table_kind = s->key == K_TFLOPS;
                    s->table_first = (s->table_kind ? s->tflops.len : s->counts.len) / 8;
                    s->table_entries = 0;
                    s->key = K_NONE;
                    s->mode = M_TABLE_EXPECT;
                    continue;
                }
                if (!open_level(s, 0))
                    return 0;
                break;
            case '{':
                if (!open_level(s, 1))
                    return 0;
                break;
            case ']':
            case '}':
                if (s->depth) {
                    s->depth--;
                    s->key = K_NONE;
                    s->last_string = K_NONE;
                }
                break;
            default:
                s->mode = M_SCALAR;
                s->last_string = K_NONE;
                if (out_byte(&s->rest, (char)c) < 0)
                    return -1;
                continue;
            }
            if (out_byte(&s->rest, (char)c) < 0)
                return -1;
            break;
        }
    }
    return 1;
}

static PyObject *strip(PyObject *Py_UNUSED(self), PyObject *args)
{
    PyObject *arg;
    long long limit = -1;
    Py_ssize_t slice_bytes = SLICE;
    if (!PyArg_ParseTuple(args, "O|Ln", &arg, &limit, &slice_bytes))
        return NULL;
    if (slice_bytes < 1 || slice_bytes > (1 << 30)) {
        PyErr_SetString(PyExc_ValueError, "slice: give 1 to 2**30 bytes");
        return NULL;
    }
    Scan *s = PyMem_Calloc(1, sizeof(Scan));
    if (!s)
        return PyErr_NoMemory();
    PyObject *result = NULL;
    int r = 1;
    Py_buffer view = {0};
    int fd = -1;
    if (PyLong_Check(arg)) {
        long given = PyLong_AsLong(arg);
        if (given == -1 && PyErr_Occurred())
            goto done;
        if (given < 0 || given > INT_MAX) {
            PyErr_SetString(PyExc_ValueError, "a file descriptor is a non-negative int");
            goto done;
        }
        fd = (int)given;
    } else if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) {
        goto done;
    }
    Py_ssize_t guess = view.len;
    if (fd >= 0) {
        struct stat st;
        guess = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? (Py_ssize_t)st.st_size : slice_bytes;
    }
    s->released = NULL;
    /* (room for what a pretty-printed instance needs: pages not written are never touched) */
    if (out_init(&s->rest, guess / 4 + 256, &s->released) < 0
            || out_init(&s->counts, guess / 4 + 64, &s->released) < 0
            || out_init(&s->tflops, guess / 4 + 64, &s->released) < 0
            || out_init(&s->tables, 4096, &s->released) < 0)
        goto done;
    char *slice = NULL;
    if (fd >= 0 && !(slice = PyMem_RawMalloc(slice_bytes))) {
        PyErr_NoMemory();
        goto done;
    }
    int read_errno = 0;
    s->released = PyEval_SaveThread();
    if (fd >= 0) {
        for (;;) {
            ssize_t k = read(fd, slice, slice_bytes);
            if (k < 0 && errno == EINTR)
                continue;
            if (k < 0) {
                read_errno = errno;
                break;
            }
            if (k == 0)
                break;
            if (limit >= 0 && s->length + k > limit) {
                r = 0;
                break;
            }
            r = feed(s, slice, k);
            if (r <= 0)
                break;
        }
    } else {
        r = limit >= 0 && view.len > limit ? 0 : feed(s, view.buf, view.len);
    }
    PyEval_RestoreThread(s->released);
    s->released = NULL;
    PyMem_RawFree(slice);
    if (read_errno) {
        errno = read_errno;
        PyErr_SetFromErrno(PyExc_OSError);
        goto done;
    }
    if (r < 0)
        goto done;
    if (r == 0 || !s->started || (s->mode != M_TOKENS && s->mode != M_SCALAR)) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    if (PyByteArray_Resize(s->rest.obj, s->rest.len) < 0 || PyByteArray_Resize(s->counts.obj, s->counts.len) < 0
            || PyByteArray_Resize(s->tflops.obj, s->tflops.len) < 0
            || PyByteArray_Resize(s->tables.obj, s->tables.len) < 0)
        goto done;
    result = Py_BuildValue("(OOOOLLL)", s->rest.obj, s->counts.obj, s->tflops.obj, s->tables.obj, s->colons,
                           s->brackets, s->length);
done:
    if (view.obj)
        PyBuffer_Release(&view);
    out_free(&s->rest);
    out_free(&s->counts);
    out_free(&s->tflops);
    out_free(&s->tables);
    PyMem_Free(s);
    return result;
}

static PyMethodDef methods[] = {
    {"strip", strip, METH_VARARGS, "(rest, counts, tflops, tables, colons, brackets, length) of an instance's "
                             "JSON text (an open file's descriptor or bytes), or None; see the module's source."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_tablescan", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__tablescan(void)
{
#ifdef SCAN_STRTOD
    if (!c_numeric && !(c_numeric = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0)))
        return PyErr_NoMemory();
#endif
    return PyModule_Create(&module);
}
