/* cmd_quantize.c — `hearth quantize [--lora ...] IN OUT TYPE`: IN a GGUF or a Hugging Face directory, OUT a GGUF (LoRA
 * adapters merged into it when given). */
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
    cli_lora lora = { 0 };
    const char *imatrix = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: hearth quantize [--pure] [--imatrix FILE] [-t THREADS] [--lora FILE[,FILE]] [--lora-scaled FILE:SCALE[,...]] IN OUT TYPE\n"
                   "IN is a GGUF file or a Hugging Face directory; OUT is written as GGUF.\n"
                   "TYPE: %s\n"
                   "As llama-quantize: a plain quantized type keeps the output matrix (or tied embedding) in\n"
                   "Q6_K (Q8_0 stays Q8_0); --pure uses TYPE for every matrix; Q4_K_M and Q5_K_M follow\n"
                   "llama.cpp's mix. Norms and biases stay F32.\n"
                   "--imatrix FILE weights the quantizers by an importance matrix (hearth imatrix, llama-imatrix's\n"
                   "GGUF format), as llama-quantize --imatrix does; IQ2_XXS and IQ2_XS need one.\n"
                   "--lora / --lora-scaled merge LoRA adapters into OUT (W + scale B A, as run --lora-merge): a matrix\n"
                   "TYPE keeps in its type is merged and requantized in it (a quantized base is rounded again, so\n"
                   "logits differ slightly from the unmerged adapter's), any other merged in F32 and quantized once.\n"
                   "OUT is written to a temporary file beside it and renamed into place when complete.\n", quant_type_list());
            return 0;
        }
        if (!strcmp(argv[i], "--pure")) pure = true;
        else if (!strcmp(argv[i], "--imatrix") && i + 1 < argc) imatrix = argv[++i];
        else if (!strcmp(argv[i], "-t") && i + 1 < argc) { if (!cli_int("-t", argv[++i], 1, 16, &threads)) return 1; }
        else if ((!strcmp(argv[i], "--lora") || !strcmp(argv[i], "--lora-scaled")) && i + 1 < argc) {
            if (!cli_lora_arg(argv[i], argv[i + 1], &lora)) { cli_lora_free(&lora); return 1; }
            i++;
        }
        else if (argv[i][0] == '-' && argv[i][1]) return cli_fail("unknown option '%s' for quantize", argv[i]);
        else if (np < 3) pos[np++] = argv[i];
        else return cli_fail("quantize takes IN OUT TYPE");
    }
    int rc = 1;
    if (np != 3) { cli_fail("quantize takes IN OUT TYPE (see hearth quantize --help)"); goto done0; }
    uint32_t base, ftype;
    int mix;
    if (quant_parse_type(pos[2], pure, &base, &mix, &ftype)) { cli_fail("unknown type '%s' (one of: %s)", pos[2], quant_type_list()); goto done0; }
    hearth_err err;
    if (quant_check_paths(pos[0], pos[1], &err)) { cli_fail("%s", err.msg); goto done0; }
    hearth_model *m = cli_load_model(pos[0]);
    if (!m) goto done0;
    if (!hearth_model_has_tokenizer(m))
        fprintf(stderr, "warning: %s has no tokenizer; %s will take token ids only\n", pos[0], pos[1]);
    if (threads <= 0) { long nc = sysconf(_SC_NPROCESSORS_ONLN); threads = nc > 0 ? (nc > 16 ? 16 : nc) : 1; }
    ht_imatrix *im = NULL;
    if (imatrix && imatrix_load(imatrix, &im, &err)) { cli_fail("%s", err.msg); goto done; }
    if (im) fprintf(stderr, "quantize: %d importance matrix entries from %s (%d chunks)\n", imatrix_entries(im), imatrix, imatrix_chunk_count(im));
    size_t merged;
    if (lora.n && (cli_lora_load(m, &lora) ||
                   (quant_merge_lora(m, lora.a, lora.scale, lora.n, pos[2], pure, (int)threads, &merged, &err) && cli_fail("%s", err.msg))))
        goto done;
    if (lora.n) fprintf(stderr, "lora: %d adapter%s merged (%.1f MiB of merged matrices)\n", lora.n, lora.n > 1 ? "s" : "", (double)merged / 1048576.0);
    cli_unlink_temps_on_signal();
    if (model_quantize_imatrix(m, pos[1], pos[2], pure, im, (int)threads, isatty(2) ? progress_bar : NULL, NULL, &err)) cli_fail("%s", err.msg);
    else rc = 0;
done:
    imatrix_free(im);
    hearth_model_free(m);
done0:
    cli_lora_free(&lora);
    return rc;
}
