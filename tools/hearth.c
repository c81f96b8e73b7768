/* hearth.c — entry point of the hearth CLI: dispatches to one cmd_*.c per subcommand. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

typedef struct { const char *name; int (*fn)(int, char **); const char *help; } command;

static const command COMMANDS[] = {
    { "run", cmd_run, "generate text from a prompt" },
    { "info", cmd_info, "print a model's architecture, hyperparameters and tensor types" },
    { "tokenize", cmd_tokenize, "print the token ids of a text" },
    { "golden", cmd_golden, "evaluate the token sequences of a golden file and write our outputs" },
    { "chat", cmd_chat, "chat with a model on stdin/stdout, through its chat template" },
    { "template", cmd_template, "render a chat template (a model's own, or a file) over a conversation" },
    { "serve", cmd_serve, "OpenAI-compatible HTTP server with continuous batching" },
    { "embed", cmd_embed, "print the pooled embedding of each text as a JSON array" },
    { "fill-mask", cmd_fill_mask, "the most likely tokens for each [MASK] of a text (BERT masked-LM)" },
    { "synth", cmd_synth, "write a random-weight model with a real model's shapes and metadata" },
    { "bench", cmd_bench, "measure prompt and generation speed, load time and memory (llama-bench style)" },
    { "perplexity", cmd_perplexity, "perplexity of a model on a text; KL divergence against a saved base run" },
    { "imatrix", cmd_imatrix, "collect an importance matrix over a text (llama.cpp's GGUF imatrix) for quantize --imatrix" },
    { "quantize", cmd_quantize, "write a GGUF or Hugging Face model as a GGUF of another tensor type" },
};

static void usage(FILE *f) {
    fprintf(f, "usage: hearth COMMAND [options]   (hearth COMMAND --help for details)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++)
        fprintf(f, "  %-12s %s\n", COMMANDS[i].name, COMMANDS[i].help);
}

int main(int argc, char **argv) {
    hearth_err err;
    /* under mpirun: the ranks but 0 serve rank 0 from here on and never return */
    if (hearth_mpi_init(&argc, &argv, cli_model_load, &err)) return cli_fail("%s", err.msg);
    if (argc < 2) { usage(stderr); return 1; }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
        printf("hearth %s (kernels: %s)\n", HEARTH_VERSION, hearth_kernels());
        return 0;
    }
    if (!strcmp(argv[1], "help") && argc > 2) {   /* hearth help CMD = hearth CMD --help */
        for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++)
            if (!strcmp(argv[2], COMMANDS[i].name)) return COMMANDS[i].fn(2, (char *[]){ argv[2], "--help", NULL });
        fprintf(stderr, "error: unknown command '%s' (try hearth --help)\n", argv[2]);
        return 1;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) { usage(stdout); return 0; }
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++)
        if (!strcmp(argv[1], COMMANDS[i].name)) return COMMANDS[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "error: unknown command '%s' (try hearth --help)\n", argv[1]);
    return 1;
}
