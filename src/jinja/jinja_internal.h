/* jinja_internal.h — what the parts of the Jinja2 interpreter share: the render context, the value model,
 * tokens and the syntax tree.
 *
 * Pipeline: jinja_lex.c turns the source into tokens (whitespace control, trim_blocks and lstrip_blocks
 * happen there), jinja_parse.c builds a syntax tree, jinja_eval.c runs it, calling the filters, tests,
 * methods and globals of jinja_builtins.c; jinja_value.c holds values and their Python-like behaviour
 * (str(), repr(), ==, <, hashing, JSON in and out).
 *
 * Memory and errors: everything a render allocates comes from the context's arena (jinja_util.c: chunks
 * for small objects, blocks for big ones, all freed at once when the render ends) and counts against the
 * memory limit. An error anywhere formats its message and longjmps back to the render's entry point
 * (jinja.c), which frees the arena and returns -1: nothing needs freeing on the way, so every helper can
 * simply fail, and the public API still reports errors as values. */
#ifndef HEARTH_JINJA_INTERNAL_H
#define HEARTH_JINJA_INTERNAL_H

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "jinja/jinja.h"

#define JPOS_NONE ((size_t)-1)

typedef struct jctx jctx;
typedef struct jnode jnode;

/* ---------------- values ---------------- */
typedef enum { JV_UNDEF, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR, JV_LIST, JV_DICT, JV_NS, JV_FUNC, JV_LOOP } jkind;

/* UTF-8, NUL-terminated; ncp_ = code points once counted (JSTR_UNCOUNTED before), read it with jstr_ncp */
typedef struct jstr { size_t len, ncp_; char s[]; } jstr;
#define JSTR_UNCOUNTED ((size_t)-1)
typedef struct jlist jlist;
typedef struct jdict jdict;
typedef struct jfunc jfunc;
typedef struct jloop jloop;
typedef struct jundef jundef;

typedef struct jv {
    jkind k;
    union { bool b; int64_t i; double f; jstr *s; jlist *l; jdict *d; jfunc *fn; jloop *lp; jundef *u; };
} jv;

/* kind: a plain list (or tuple), or what Python would have as a lazy object: a generator (map, select,
 * ... return one: always true, no len(), no indexing) or a dict view (d.items(), keys(), values()). */
enum { JL_LIST, JL_GEN, JL_ITEMS, JL_KEYS, JL_VALUES };
struct jlist { jv *v; size_t n, cap; bool tuple; uint8_t kind; };
struct jdict { jv *keys, *vals; size_t n, cap; int32_t *idx; size_t idx_cap; };  /* insertion-ordered */

/* Why a value is undefined, for the message when it is used: a missing variable (no obj), a missing
 * attribute or item of obj, or a plain hint. */
struct jundef { const char *name, *hint; jkind obj; bool has_obj, obj_is_tuple, non_str_key; };

typedef struct jcall { const jv *pos; size_t npos; const char *const *kwn; const jv *kwv; size_t nkw; } jcall;

/* A builtin filter, test, method or global. self is the filter's input, the tested value or the method's
 * object. Unless raw, arguments are bound to params by position or name: a[i] and has[i]. */
typedef jv (*jfn)(jctx *c, const jnode *at, jv self, const jv *a, const bool *has, const jcall *call);
#define JB_MAXP 6
typedef struct jbuiltin { const char *name; jfn fn; const char *params[JB_MAXP]; bool raw; int nreq; } jbuiltin;
/* table entries: B(name, fn, required count, param names...) binds arguments; RAW(name, fn) gets the call */
#define B(nm, f, req, ...) { nm, f, { __VA_ARGS__ }, false, req }
#define RAW(nm, f) { nm, f, { NULL }, true, 0 }

enum { JF_BUILTIN, JF_MACRO, JF_CALLER };
typedef struct jscope jscope;
struct jfunc { int kind; const char *name; jv self; const jbuiltin *def; const jnode *node; jscope *closure; };

struct jloop { jlist *items; size_t i; int depth; jv changed_last; bool changed_set; };

struct jscope { jscope *parent; jdict vars; };

typedef struct jbuf { char *p; size_t n, cap; } jbuf;

/* ---------------- tokens ---------------- */
typedef enum { T_EOF, T_DATA, T_VAR_BEGIN, T_VAR_END, T_BLOCK_BEGIN, T_BLOCK_END, T_NAME, T_STRING, T_INT, T_FLOAT,
               T_OP } jtkind;
enum { OP_ADD = 1, OP_SUB, OP_DIV, OP_FLOORDIV, OP_MUL, OP_MOD, OP_POW, OP_TILDE, OP_LBRACKET, OP_RBRACKET,
       OP_LPAREN, OP_RPAREN, OP_LBRACE, OP_RBRACE, OP_EQ, OP_NE, OP_GT, OP_GTEQ, OP_LT, OP_LTEQ, OP_ASSIGN,
       OP_DOT, OP_COLON, OP_PIPE, OP_COMMA, OP_SEMICOLON,
       /* not tokens: operators of the tree */
       OP_IN, OP_NOTIN };

typedef struct jtok {
    jtkind k; int op;
    size_t pos;               /* byte offset in the (newline-normalised) source */
    const char *s; size_t n;  /* text of DATA and NAME; decoded value of STRING */
    int64_t i; double f;
} jtok;

/* ---------------- syntax tree ---------------- */
typedef enum {
    /* expressions */
    N_CONST, N_NAME, N_LIST, N_TUPLE, N_DICT, N_GETATTR, N_GETITEM, N_SLICE, N_CALL, N_FILTER, N_TEST, N_NOT,
    N_NEG, N_POS, N_BINOP, N_AND, N_OR, N_COMPARE, N_COND, N_NSREF,
    /* statements */
    N_TEXT, N_OUTPUT, N_IF, N_FOR, N_SET, N_SETBLOCK, N_MACRO, N_CALLBLOCK, N_FILTERBLOCK, N_WITH, N_BREAK,
    N_CONTINUE, N_DO, N_SCOPE, N_BODY
} jnkind;

/* Field use by kind:
 *  CONST val | NAME name (val: name as a str) | LIST/TUPLE kids | DICT kids = key, value, key, value...
 *  GETATTR a.name | GETITEM a[b] | SLICE a:b:c (NULL = none) | CALL a(kids, kwn=kwv)
 *  FILTER a|name(kids, kwn=kwv), a NULL in filter blocks | TEST a is name(kids, kwn=kwv)
 *  NOT/NEG/POS a | BINOP a op b | AND/OR a b | COMPARE a ops[i] kids[i]... | COND b if a else c
 *  NSREF name.name2 (assignment target; val: name2 as a str)
 *  TEXT val | OUTPUT a | IF a: kids else kids2 | FOR a in b if c: kids else kids2
 *  SET a = b | SETBLOCK a (filter b) kids | MACRO name(kwn = kwv defaults, NULL if none): kids
 *  CALLBLOCK call a, caller params kwn/kwv: kids | FILTERBLOCK b (chain ending in a NULL operand): kids
 *  WITH kwn = kwv: kids | DO a | SCOPE kids (a body run in a child scope) | BODY kids (run in place)
 *  IF with op = 1 is an elif: the only statement of its parent's else body. */
struct jnode {
    jnkind k; int op; size_t pos;
    jv val;
    const char *name, *name2;
    const jbuiltin *fn;             /* resolved filter or test; NULL if Jinja2 has it but we do not */
    jnode *a, *b, *c;
    jnode **kids; size_t nk;
    jnode **kids2; size_t nk2;
    const char **kwn; jnode **kwv; size_t nkw;
    int *ops;
};

/* ---------------- the render context ---------------- */
typedef struct jblock jblock;
struct jctx {
    jmp_buf jmp;
    hearth_err *err;
    const char *src; size_t src_len;   /* normalised source, for positions in messages */
    jblock *blocks; size_t mem;        /* arena: blocks, bytes charged */
    char *chunk; size_t chunk_left;    /* arena: the chunk small allocations come from */
    uint64_t steps; int depth;
    uint64_t max_steps; size_t max_memory, max_output;
    jbuf *out;                         /* where output goes now */
    jscope *globals, *root;
    jtok *toks; size_t ntok, tp;       /* tokens, parser position */
    int loop_depth;                    /* parser: inside how many for loops (for break/continue) */
    const char *const *ends;           /* parser: end tags the innermost open block waits for */
    jscope *scope;                     /* evaluator: the current scope */
    jv pipe_in;                        /* evaluator: input of a filter block's chain */
    jv loop_key;                       /* evaluator: the string "loop", made once */
};

/* errors: format, then unwind to the entry point */
_Noreturn void jfail(jctx *c, size_t pos, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
_Noreturn void jfail_raw(jctx *c, const char *msg);
void jenter(jctx *c, size_t pos);      /* depth and step accounting around recursion */
void jstep(jctx *c, size_t pos);       /* one step of work (a loop iteration) */
static inline void jleave(jctx *c) { c->depth--; }

/* arena */
void *ja_alloc(jctx *c, size_t n);                      /* zeroed */
void *ja_grow(jctx *c, void *p, size_t old, size_t n);  /* like realloc (old = p's size); p may be NULL */
void ja_free_all(jctx *c);
char *ja_strndup(jctx *c, const char *s, size_t n);

/* byte buffers */
void jb_put(jctx *c, jbuf *b, const char *s, size_t n);
void jb_puts(jctx *c, jbuf *b, const char *s);
void jb_putc(jctx *c, jbuf *b, char ch);
void jb_printf(jctx *c, jbuf *b, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* UTF-8 and Python character classes */
int utf8_next(const char *s, size_t n, int32_t *cp);    /* bytes of the code point at s (1 for a bad byte) */
void jb_put_cp(jctx *c, jbuf *b, int32_t cp);
size_t utf8_count(const char *s, size_t n);
size_t jstr_ncp(const jstr *s);                         /* Python len(): code points */
size_t utf8_offset(const char *s, size_t n, size_t cp_index);  /* byte offset of a code point index */
bool py_isspace(int32_t cp);
int py_space_len(const char *s, size_t n);              /* bytes of the whitespace char at s, or 0 */
bool py_isalnum(int32_t cp);
int32_t cp_upper(int32_t cp), cp_lower(int32_t cp), cp_title(int32_t cp);
bool cp_is_cased(int32_t cp), cp_is_upper(int32_t cp), cp_is_lower(int32_t cp), cp_is_decimal(int32_t cp);
jv jb_str_replace(jctx *c, const jstr *s, const jstr *old, const jstr *new_, int64_t count);
jv jb_str_center(jctx *c, const jstr *s, int64_t width);

/* values */
static inline jv jv_undef(void) { jv v = { .k = JV_UNDEF }; return v; }
static inline jv jv_none(void) { jv v = { .k = JV_NONE }; return v; }
static inline jv jv_bool(bool b) { jv v = { .k = JV_BOOL, .b = b }; return v; }
static inline jv jv_int(int64_t i) { jv v = { .k = JV_INT, .i = i }; return v; }
static inline jv jv_float(double f) { jv v = { .k = JV_FLOAT, .f = f }; return v; }
jv jv_undef_name(jctx *c, const char *name);
jv jv_undef_attr(jctx *c, jv obj, const char *name);
jv jv_undef_item(jctx *c, jv obj, jv key);
jv jv_undef_hint(jctx *c, const char *hint);
const char *jv_undef_msg(jctx *c, jv v);
jv jv_str(jctx *c, const char *s, size_t n);
jv jv_cstr(jctx *c, const char *s);
jv jv_buf(jctx *c, const jbuf *b);
jv jv_list(jctx *c, size_t cap);
jv jv_tuple2(jctx *c, jv a, jv b);
jv jv_dict(jctx *c);
jv jv_ns(jctx *c);
jv jv_func(jctx *c, int kind, const char *name, jv self, const jbuiltin *def, const jnode *node, jscope *closure);
void jl_push(jctx *c, jlist *l, jv v);
void jd_init(jdict *d);
void jd_clear(jdict *d);
bool jd_get(jctx *c, const jdict *d, jv key, jv *out);
bool jd_get_s(const jdict *d, const char *key, jv *out);
void jd_set(jctx *c, jdict *d, jv key, jv val);
void jd_set_s(jctx *c, jdict *d, const char *key, jv val);

const char *jv_type_name(jv v);
static inline bool jv_is_num(jv v) { return v.k == JV_BOOL || v.k == JV_INT || v.k == JV_FLOAT; }
static inline bool jv_is_plain_list(jv v) { return v.k == JV_LIST && v.l->kind == JL_LIST; }
double jv_num(jv v);                          /* a number as double */
bool jv_truthy(jv v);
bool jv_eq(jctx *c, jv a, jv b);
int jv_cmp(jctx *c, size_t pos, jv a, jv b, const char *op);  /* Python ordering, <0/0/>0; fails if unorderable */
uint64_t jv_hash(jctx *c, size_t pos, jv v);  /* fails on unhashable values */
jstr *jv_to_str(jctx *c, jv v);               /* Python str() (undefined prints as "") */
void jv_write_str(jctx *c, jbuf *b, jv v);
void jv_write_repr(jctx *c, jbuf *b, jv v);
void py_float_repr(double f, char out[40]);

typedef struct { const char *indent; bool ensure_ascii, sort_keys; const char *item_sep, *key_sep; } jjson_opts;
void jv_write_json(jctx *c, size_t pos, jbuf *b, jv v, const jjson_opts *o);
jv jv_from_cjson(jctx *c, const cJSON *j);

/* lexer, parser, evaluator */
void jinja_lex(jctx *c, const char *src, size_t len);
const char *jinja_op_text(int op);
jnode *jinja_parse(jctx *c);
void jinja_exec_template(jctx *c, const jnode *body);

/* evaluator services used by builtins */
jv jeval_getattr(jctx *c, size_t pos, jv obj, const char *name);
bool jeval_attr_only(jctx *c, jv obj, const char *name, jv *out);   /* methods and attributes, not items */
jv jeval_getitem(jctx *c, size_t pos, jv obj, jv key);
jv jeval_call(jctx *c, const jnode *at, jv fn, const jcall *call);
jv jeval_binop(jctx *c, size_t pos, int op, jv a, jv b);   /* a op b, op one of OP_ADD ... OP_TILDE */
jlist *jeval_iter_list(jctx *c, size_t pos, jv v);   /* items a for loop would see */
void jcheck_defined(jctx *c, size_t pos, jv v);      /* fails with the undefined's message */

/* builtins (jinja_builtins.c: filters, tests, globals, list/dict/loop methods; jinja_strings.c: str
 * methods and Python's two string formatting languages) */
#define JBUILTIN(fname) static jv fname(jctx *c __attribute__((unused)), const jnode *at __attribute__((unused)), \
    jv self __attribute__((unused)), const jv *a __attribute__((unused)), const bool *has __attribute__((unused)), \
    const jcall *call __attribute__((unused)))
int64_t jb_int(jctx *c, const jnode *at, jv v, const char *what);   /* an int (or bool) argument */
const jstr *jb_str_arg(jctx *c, const jnode *at, jv v, const char *what);   /* a str argument */
const jbuiltin *jb_find_str_method(const char *name);
jv jb_format_method(jctx *c, const jnode *at, const jstr *fmt, const jcall *call);   /* str.format */
jv jb_str_lower(jctx *c, const jstr *s), jb_str_upper(jctx *c, const jstr *s);
jv jb_str_strip(jctx *c, const jstr *s, const jstr *chars, bool left, bool right);
const jbuiltin *jb_find_filter(const char *name, bool *known);
const jbuiltin *jb_find_test(const char *name, bool *known);
const jbuiltin *jb_find_method(jv obj, const char *name);
jv jb_percent_format(jctx *c, size_t pos, const jstr *fmt, jv args);   /* Python's str % args */
void jb_add_globals(jctx *c, jdict *g);
jv jb_run(jctx *c, const jnode *at, const jbuiltin *b, jv self, const jcall *call);
jv jb_filter(jctx *c, const jnode *at, const char *name, jv v, const jcall *call);
bool jb_test(jctx *c, const jnode *at, const char *name, jv v, const jcall *call);

#endif
