/* cmd_quantize.c — `hearth quantize IN OUT TYPE`: IN a GGUF or a Hugging Face directory, OUT a GGUF. */
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "convert/quantize.h"
#include "model/imatrix.h"

static void progress_bar(void *user, int done, int total, const char *name) {
    (void)user;
    int width = 30, fill = total ? done * width / total : width;
    fprintf(stderr, "\r[%.*s%*s] %d/%d %-40.40s", fill, "##############################", width - fill, "", done, total, name);
    if (done == total) fputc('\n', stderr);
    fflush(stderr);
}

int cmd_quantize(int argc, char **argv) {
    const char *pos[3] = { 0 };
    int np = 0;
    long threads = 0;
    bool pure = false;
    const char *imatrix = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: hearth quantize [--pure] [--imatrix FILE] [-t THREADS] IN OUT TYPE\n"
                   "IN is a GGUF file or a Hugging Face directory; OUT is written as GGUF.\n"
                   "TYPE: %s\n"
                   "As llama-quantize: a plain quantized type keeps the output matrix (or tied embedding) in\n"
                   "Q6_K (Q8_0 stays Q8_0); --pure uses TYPE for every matrix; Q4_K_M and Q5_K_M follow\n"
                   "llama.cpp's mix. Norms and biases stay F32.\n"
                   "--imatrix FILE weights the quantizers by an importance matrix (hearth imatrix, llama-imatrix's\n"
                   "GGUF format), as llama-quantize --imatrix does; IQ2_XXS needs one.\n", quant_type_list());
            return 0;
        }
        if (!strcmp(argv[i], "--pure")) pure = true;
        else if (!strcmp(argv[i], "--imatrix") && i + 1 < argc) imatrix = argv[++i];
        else if (!strcmp(argv[i], "-t") && i + 1 < argc) { if (!cli_int("-t", argv[++i], 1, 16, &threads)) return 1; }
        else if (argv[i][0] == '-' && argv[i][1]) return cli_fail("unknown option '%s' for quantize", argv[i]);
        else if (np < 3) pos[np++] = argv[i];
        else return cli_fail("quantize takes IN OUT TYPE");
    }
    if (np != 3) return cli_fail("quantize takes IN OUT TYPE (see hearth quantize --help)");
    uint32_t base, ftype;
    int mix;
    if (quant_parse_type(pos[2], pure, &base, &mix, &ftype)) return cli_fail("unknown type '%s' (one of: %s)", pos[2], quant_type_list());
    hearth_err err;
    if (quant_check_paths(pos[0], pos[1], &err)) return cli_fail("%s", err.msg);
    hearth_model *m = cli_load_model(pos[0]);
    if (!m) return 1;
    if (!hearth_model_has_tokenizer(m))
        fprintf(stderr, "warning: %s has no tokenizer; %s will take token ids only\n", pos[0], pos[1]);
    cli_unlink_temps_on_signal();
    if (threads <= 0) { long nc = sysconf(_SC_NPROCESSORS_ONLN); threads = nc > 0 ? (nc > 16 ? 16 : nc) : 1; }
    ht_imatrix *im = NULL;
    if (imatrix && imatrix_load(imatrix, &im, &err)) {
        hearth_model_free(m);
        return cli_fail("%s", err.msg);
    }
    if (im) fprintf(stderr, "quantize: %d importance matrix entries from %s (%d chunks)\n", imatrix_entries(im), imatrix, imatrix_chunk_count(im));
    int rc = model_quantize_imatrix(m, pos[1], pos[2], pure, im, (int)threads, isatty(2) ? progress_bar : NULL, NULL, &err);
    imatrix_free(im);
    hearth_model_free(m);
    if (rc) return cli_fail("%s", err.msg);
    return 0;
}
