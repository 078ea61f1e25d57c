#include "sequence_views.h"

#include "problem_data.h"

namespace gdn::testkit {
namespace {

gdn_tensor tokens(gdn_tensor t, int64_t begin, int64_t length) {
    if (t.data == nullptr) return t;
    t.data = static_cast<char *>(t.data) + begin * t.nb[2];
    t.ne[2] = length;
    return t;
}

gdn_tensor state_of(gdn_tensor t, int64_t n) {
    if (t.data == nullptr) return t;
    if (n < 0) return gdn_tensor{};  // a negative pool index: no state read or written
    t.data = static_cast<char *>(t.data) + n * t.nb[3];
    t.ne[3] = 1;
    return t;
}

gdn_tensor slots_of(gdn_tensor t, int64_t n, int64_t N, int64_t K) {
    if (t.data == nullptr) return t;
    t.data = static_cast<char *>(t.data) + n * t.nb[3];
    t.nb[3] *= N;
    t.ne[3] = K;
    return t;
}

}  // namespace

CallTensors call_tensors(const Case &c, const Mirror &in, const Mirror &out) {
    CallTensors t;
    t.problem = problem_of(c, in);
    if (c.op == Op::Forward) {
        t.out = out.tensor("out");
        t.states = c.in_place ? in.tensor("state") : out.tensor("states");
    } else {
        t.d_out = in.tensor("d_out");
        t.d_states = in.tensor("d_states");
        t.grads = grads_of(out);
    }
    return t;
}

CallTensors sequence_views(const Case &c, const CallTensors &packed, int64_t n) {
    const int64_t begin = c.cu_seqlens[n], length = c.cu_seqlens[n + 1] - begin, N = c.sequences(), K = c.shape.K;
    CallTensors s = packed;
    gdn_problem &p = s.problem;
    p.cu_seqlens = gdn_tensor{};
    p.state_indices = gdn_tensor{};
    for (gdn_tensor *t : {&p.q, &p.k, &p.v, &p.g, &p.beta, &s.out, &s.d_out, &s.grads.q, &s.grads.k, &s.grads.v,
                          &s.grads.g, &s.grads.beta})
        *t = tokens(*t, begin, length);
    if (c.pooled()) {  // K = 1: every state-shaped tensor holds slot slot_of(n)
        for (gdn_tensor *t : {&p.state, &s.grads.state, &s.states, &s.d_states}) *t = state_of(*t, c.slot_of(n));
        return s;
    }
    p.state = state_of(p.state, n);
    s.grads.state = state_of(s.grads.state, n);
    s.states = slots_of(s.states, n, N, K);
    s.d_states = slots_of(s.d_states, n, N, K);
    return s;
}

}  // namespace gdn::testkit
