/* A C program built against an installed libgdn (scripts/ci-consumers.sh): prints gdn_version()
 * and runs one forward of one token from a zero state, whose output has a closed form:
 * S = k (beta v)^T, so o = scale (q . k) beta v. */
#include <gdn/gdn.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

enum { SK = 4, SV = 3 };

static gdn_tensor vector_f32(float *data, int64_t n) {
    gdn_tensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.type = GDN_TYPE_F32;
    t.ne[0] = n;
    t.ne[1] = t.ne[2] = t.ne[3] = 1;
    t.nb[0] = sizeof(float);
    t.nb[1] = t.nb[2] = t.nb[3] = (int64_t)sizeof(float) * n;
    return t;
}

int main(void) {
    float q[SK] = {0.5f, -0.25f, 1.0f, 0.125f}, k[SK] = {0.25f, 0.5f, -0.75f, 1.0f};
    float v[SV] = {1.0f, -2.0f, 0.5f}, g = -0.3f, beta = 0.75f, out[SV];
    const float scale = 0.5f;

    gdn_problem p;
    memset(&p, 0, sizeof p);
    p.q = vector_f32(q, SK);
    p.k = vector_f32(k, SK);
    p.v = vector_f32(v, SV);
    p.g = vector_f32(&g, 1);
    p.beta = vector_f32(&beta, 1);
    p.state.type = GDN_TYPE_F32; /* data NULL: a zero initial state */
    p.scale = scale;
    const gdn_tensor o = vector_f32(out, SV);

    printf("gdn %s (header %d.%d.%d)\n", gdn_version(), GDN_VERSION_MAJOR, GDN_VERSION_MINOR, GDN_VERSION_PATCH);
    if (gdn_version_number() != GDN_VERSION_NUMBER) {
        fprintf(stderr, "libgdn %s does not match its header\n", gdn_version());
        return 1;
    }
    gdn_context *ctx = NULL;
    if (gdn_context_create("cpu", NULL, &ctx) != GDN_OK) {
        fprintf(stderr, "gdn_context_create: %s\n", gdn_last_create_error());
        return 1;
    }
    const gdn_status s = gdn_forward(ctx, &p, &o, NULL);
    if (s != GDN_OK) {
        fprintf(stderr, "gdn_forward: %s: %s\n", gdn_status_string(s), gdn_last_error(ctx));
        return 1;
    }
    gdn_context_free(ctx);

    double qk = 0;
    for (int i = 0; i < SK; ++i) qk += (double)q[i] * k[i];
    int failed = 0;
    for (int j = 0; j < SV; ++j) {
        const double want = scale * qk * beta * v[j];
        printf("o[%d] = %.7f (closed form %.7f)\n", j, out[j], want);
        if (!(fabs(out[j] - want) <= 1e-6 * (1 + fabs(want)))) failed = 1;
    }
    puts(failed ? "FAILED" : "ok");
    return failed;
}
