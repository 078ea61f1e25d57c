/* llama-logits: the logits of a fixed prompt through libllama, to compare llama.cpp with and
 * without libggml-gdn loaded (scripts/test-llama-cpp.sh).
 *   llama-logits MODEL.gguf OUT.bin [TOKENS]   decodes TOKENS (default 300) fixed token ids in one
 *                                              batch, writes every position's logits (F32)
 *   llama-logits --compare A.bin B.bin         prints the largest |a - b|, the largest |a|, and
 *                                              at how many positions the top token differs;
 *                                              exit status 1 when the files differ in size
 * The prompt is token ids (7 i + 3) mod n_vocab, so no tokenizer is involved. ggml's backends are
 * loaded from the folder GGML_BACKEND_DIR names (llama.cpp's bin/), and GGML_BACKEND_PATH's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml-backend.h"
#include "llama.h"

static float *read_all(const char *path, long *count) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long bytes = ftell(f);
    fseek(f, 0, SEEK_SET);
    float *data = malloc(bytes > 0 ? (size_t)bytes : 1);
    *count = bytes / (long)sizeof(float);
    if (!data || fread(data, sizeof(float), (size_t)*count, f) != (size_t)*count) {
        fclose(f);
        free(data);
        return NULL;
    }
    fclose(f);
    return data;
}

static int compare(const char *a_path, const char *b_path, int n_vocab) {
    long na = 0, nb = 0;
    float *a = read_all(a_path, &na), *b = read_all(b_path, &nb);
    if (!a || !b || na != nb || na == 0) {
        fprintf(stderr, "llama-logits: %s and %s cannot be compared (%ld and %ld floats)\n", a_path, b_path, na, nb);
        return 1;
    }
    double max_diff = 0, max_abs = 0;
    long top_differs = 0, rows = n_vocab > 0 ? na / n_vocab : 0;
    for (long i = 0; i < na; ++i) {
        double d = fabs((double)a[i] - b[i]);
        if (d > max_diff || d != d) max_diff = d;
        if (fabs(a[i]) > max_abs) max_abs = fabs(a[i]);
    }
    for (long r = 0; r < rows; ++r) {
        long ta = 0, tb = 0;
        for (long j = 1; j < n_vocab; ++j) {
            if (a[r * n_vocab + j] > a[r * n_vocab + ta]) ta = j;
            if (b[r * n_vocab + j] > b[r * n_vocab + tb]) tb = j;
        }
        top_differs += ta != tb;
    }
    printf("logits: %ld values, max |a - b| = %.3g, max |a| = %.3g, relative %.3g, top token differs at %ld of %ld positions\n",
           na, max_diff, max_abs, max_abs > 0 ? max_diff / max_abs : 0.0, top_differs, rows);
    free(a);
    free(b);
    return max_diff == max_diff ? 0 : 1; /* a NaN anywhere fails the comparison */
}

int main(int argc, char **argv) {
    if (argc >= 4 && strcmp(argv[1], "--compare") == 0) return compare(argv[2], argv[3], argc > 4 ? atoi(argv[4]) : 0);
    if (argc < 3) {
        fprintf(stderr, "usage: llama-logits MODEL.gguf OUT.bin [TOKENS] | llama-logits --compare A.bin B.bin [N_VOCAB]\n");
        return 2;
    }
    const int n_tokens = argc > 3 ? atoi(argv[3]) : 300;
    if (n_tokens < 1 || n_tokens > 100000) {
        fprintf(stderr, "llama-logits: TOKENS must be 1..100000\n");
        return 2;
    }
    llama_backend_init();
    ggml_backend_load_all_from_path(getenv("GGML_BACKEND_DIR"));
    struct llama_model_params mp = llama_model_default_params();
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) {
        fprintf(stderr, "llama-logits: cannot load %s\n", argv[1]);
        return 1;
    }
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)n_tokens + 16;
    cp.n_batch = cp.n_ubatch = (uint32_t)n_tokens;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    struct llama_batch batch = llama_batch_init(n_tokens, 0, 1);
    for (int i = 0; i < n_tokens; ++i) {
        batch.token[i] = (llama_token)((7L * i + 3) % n_vocab);
        batch.pos[i] = i;
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i] = 1;
    }
    batch.n_tokens = n_tokens;
    if (!ctx || llama_decode(ctx, batch) != 0) {
        fprintf(stderr, "llama-logits: decoding failed\n");
        return 1;
    }
    FILE *out = fopen(argv[2], "wb");
    if (!out) return 1;
    for (int i = 0; i < n_tokens; ++i) fwrite(llama_get_logits_ith(ctx, i), sizeof(float), (size_t)n_vocab, out);
    fclose(out);
    printf("n_vocab %d\n", n_vocab);
    llama_batch_free(batch);
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}
