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
    { "embed", cmd_embed, "print the pooled embedding of each text as a JSON array" },
    { "perplexity", cmd_perplexity, "perplexity of a model on a text; KL divergence against a saved base run" },
    { "quantize", cmd_quantize, "write a GGUF or Hugging Face model as a GGUF of another tensor type" },
};

static void usage(FILE *f) {
    fprintf(f, "usage: hearth COMMAND [options]   (hearth COMMAND --help for details)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++)
        fprintf(f, "  %-12s %s\n", COMMANDS[i].name, COMMANDS[i].help);
}

int main(int argc, char **argv) {
    if (argc < 2) { usage(stderr); return 1; }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) { usage(stdout); return 0; }
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++)
        if (!strcmp(argv[1], COMMANDS[i].name)) return COMMANDS[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "error: unknown command '%s' (try hearth --help)\n", argv[1]);
    return 1;
}
