// Identities between differently laid out or differently parameterised calls on the ref backend:
// a strided view gives the same bits as its contiguous copy; tiled and grouped head maps agree
// after permuting value heads; a per-channel gate with equal channels is the scalar gate; fewer
// q/k sequences equal explicitly repeated q/k with dq/dk summed over the repeats.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "case.h"
#include "host_problem.h"
#include "problem_data.h"
#include "runner.h"

namespace {

using namespace gdn::reftest;
using gdn::testkit::Case;
using gdn::testkit::Op;

const char *type_label(gdn_type t) { return t == GDN_TYPE_F64 ? "F64" : "F32"; }

std::string difference(const HostTensor &a, const HostTensor &b) {
    return "relative difference " + std::to_string(relative_difference(a, b));
}

#define EXPECT_SAME_BITS(a, b, what) EXPECT_TRUE(same_bits(a, b)) << (what) << ": " << difference(a, b)

// ---- strided views ---------------------------------------------------------------------------

bool same_values_bitwise(const std::vector<double> &a, const std::vector<double> &b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

TEST(Identities, StridedViewsGiveTheSameBitsAsContiguousCopies) {
    // Through the test kit: the strided case puts q, k, v (and dq, dk, dv) as row views into one
    // packed conv buffer and pads every other tensor's strides; make_inputs fills values in
    // element order, so both layouts of one seed hold the same numbers.
    gdn::testkit::BackendSession session({"REF", "ref", 0}, 1);
    ASSERT_TRUE(session.ok()) << session.error();
    for (gdn_type type : {GDN_TYPE_F64, GDN_TYPE_F32})
        for (Op op : {Op::Forward, Op::Backward})
            for (int variant = 0; variant < 3; ++variant) {
                Case c;
                c.op = op;
                c.shape = {16, 8, 2, 6, 9, 2, 2, 1};  // Sk, Sv, Hk, Hv, T, B, Bq, K
                c.kda = variant == 1;
                c.heads = variant == 2 ? GDN_HEAD_MAP_GROUPED : GDN_HEAD_MAP_TILED;
                if (variant == 2) c.shape.K = 3;
                Case strided = c, contiguous = c;
                strided.strided = true;
                contiguous.strided = false;
                SCOPED_TRACE(strided.label() + " " + type_label(type));
                gdn::testkit::TensorSet in_s = gdn::testkit::make_inputs(strided, type, 31 + variant);
                gdn::testkit::TensorSet in_c = gdn::testkit::make_inputs(contiguous, type, 31 + variant);
                ASSERT_NE(in_s.host("q").nb[2], in_c.host("q").nb[2]) << "the layouts must differ";
                gdn::testkit::RunResult rs = gdn::testkit::run_case(strided, in_s, session);
                gdn::testkit::RunResult rc = gdn::testkit::run_case(contiguous, in_c, session);
                ASSERT_EQ(rs.status, GDN_OK) << rs.error;
                ASSERT_EQ(rc.status, GDN_OK) << rc.error;
                EXPECT_EQ(rs.stray_write, "");
                EXPECT_EQ(rc.stray_write, "");
                for (const auto &[name, view] : rc.outputs.views())
                    EXPECT_TRUE(same_values_bitwise(rs.outputs.read(name), rc.outputs.read(name))) << name;
            }
}

// ---- head maps -------------------------------------------------------------------------------

TEST(Identities, TiledAndGroupedAgreeAfterPermutingValueHeads) {
    // Tiled value head kh + j*Hk and grouped value head kh*r + j (r = Hv/Hk) both read key head
    // kh as its j-th reader: permuting v, g, beta, s0, dO, dS by that map turns one problem into
    // the other, and every result permutes the same way (dq, dk are unchanged). The ref sums
    // dq/dk over a key head's readers in j order under either map: the same bits.
    for (gdn_type type : {GDN_TYPE_F64, GDN_TYPE_F32})
        for (bool kda : {false, true}) {
            SCOPED_TRACE(std::string(type_label(type)) + (kda ? " KDA" : " GDA"));
            Sizes s;
            s.Sk = 4;
            s.Sv = 3;
            s.Hk = 2;
            s.Hv = 6;
            s.T = 7;
            s.B = 2;
            s.Bq = 2;
            s.kda = kda;
            const int64_t r = s.Hv / s.Hk, K = 2;
            const HostProblem tiled = random_problem(s, type, 303);
            std::vector<int64_t> tiled_head_of(static_cast<size_t>(s.Hv));  // indexed by grouped head
            for (int64_t kh = 0; kh < s.Hk; ++kh)
                for (int64_t j = 0; j < r; ++j) tiled_head_of[kh * r + j] = kh + j * s.Hk;
            HostProblem grouped = tiled;
            grouped.sizes.heads = GDN_HEAD_MAP_GROUPED;
            grouped.v = gather(tiled.v, 1, tiled_head_of);
            grouped.g = gather(tiled.g, 1, tiled_head_of);
            grouped.beta = gather(tiled.beta, 1, tiled_head_of);
            grouped.state = gather(tiled.state, 2, tiled_head_of);

            RefContext ctx;
            const ForwardResult ft = forward(ctx.get(), tiled, K), fg = forward(ctx.get(), grouped, K);
            EXPECT_SAME_BITS(fg.out, gather(ft.out, 1, tiled_head_of), "out");
            EXPECT_SAME_BITS(fg.states, gather(ft.states, 2, tiled_head_of), "states");

            const HostTensor d_out = random_tensor(type, ft.out.ne(), 7), d_states = random_tensor(type, ft.states.ne(), 8);
            const Gradients gt = backward(ctx.get(), tiled, d_out, d_states);
            const Gradients gg =
                backward(ctx.get(), grouped, gather(d_out, 1, tiled_head_of), gather(d_states, 2, tiled_head_of));
            EXPECT_SAME_BITS(gg.dq, gt.dq, "dq");
            EXPECT_SAME_BITS(gg.dk, gt.dk, "dk");
            EXPECT_SAME_BITS(gg.dv, gather(gt.dv, 1, tiled_head_of), "dv");
            EXPECT_SAME_BITS(gg.dg, gather(gt.dg, 1, tiled_head_of), "dg");
            EXPECT_SAME_BITS(gg.dbeta, gather(gt.dbeta, 1, tiled_head_of), "dbeta");
            EXPECT_SAME_BITS(gg.ds0, gather(gt.ds0, 2, tiled_head_of), "ds0");

            // And the maps differ: without the permutation the results are not the same.
            const ForwardResult unpermuted = forward(ctx.get(), [&] {
                HostProblem x = tiled;
                x.sizes.heads = GDN_HEAD_MAP_GROUPED;
                return x;
            }());
            EXPECT_GT(relative_difference(unpermuted.out, forward(ctx.get(), tiled).out), 1e-3);
        }
}

// ---- per-channel gate with equal channels ----------------------------------------------------

TEST(Identities, KdaWithEqualChannelsEqualsGda) {
    for (gdn_type type : {GDN_TYPE_F64, GDN_TYPE_F32}) {
        SCOPED_TRACE(type_label(type));
        Sizes s;
        s.Sk = 6;
        s.Sv = 4;
        s.Hk = 2;
        s.Hv = 4;
        s.T = 11;
        s.B = s.Bq = 2;
        const HostProblem gda = random_problem(s, type, 404);
        HostProblem kda = gda;
        kda.sizes.kda = true;
        kda.g = gather(gda.g, 0, std::vector<int64_t>(static_cast<size_t>(s.Sk), 0));  // every channel = the scalar gate
        RefContext ctx;
        const int64_t K = 2;
        const ForwardResult fg = forward(ctx.get(), gda, K), fk = forward(ctx.get(), kda, K);
        // The same products in the same order: the same bits.
        EXPECT_SAME_BITS(fk.out, fg.out, "out");
        EXPECT_SAME_BITS(fk.states, fg.states, "states");

        const HostTensor d_out = random_tensor(type, fg.out.ne(), 9), d_states = random_tensor(type, fg.states.ne(), 10);
        const Gradients gg = backward(ctx.get(), gda, d_out, d_states), gk = backward(ctx.get(), kda, d_out, d_states);
        EXPECT_SAME_BITS(gk.dq, gg.dq, "dq");
        EXPECT_SAME_BITS(gk.dk, gg.dk, "dk");
        EXPECT_SAME_BITS(gk.dv, gg.dv, "dv");
        EXPECT_SAME_BITS(gk.dbeta, gg.dbeta, "dbeta");
        EXPECT_SAME_BITS(gk.ds0, gg.ds0, "ds0");
        // The scalar gate's gradient is the sum of the channels' gradients. The ref sums the
        // same terms in another order (and F32 rounds Sk partial sums instead of one total):
        // F64 to rounding, F32 to Sk half-ulps of the largest channel term.
        HostTensor dg_sum(type, gg.dg.ne());
        for (int64_t n = 0; n < dg_sum.count(); ++n) {
            double x = 0;
            for (int64_t i = 0; i < s.Sk; ++i) x += gk.dg.get(n * s.Sk + i);
            dg_sum.set(n, x);
        }
        EXPECT_LE(relative_difference(dg_sum, gg.dg), type == GDN_TYPE_F64 ? 1e-14 : 5e-7);
    }
}

// ---- fewer q/k sequences than sequences -------------------------------------------------------

TEST(Identities, SharedQkSequencesEqualRepeatedQkWithSummedGradients) {
    // B = 4 sequences reading Bq = 2 q/k sequences (b reads b / 2) is the same problem as q, k
    // repeated to 4 sequences; dq, dk of the shared q/k are the sums over their readers.
    for (gdn_type type : {GDN_TYPE_F64, GDN_TYPE_F32})
        for (gdn_head_map heads : {GDN_HEAD_MAP_TILED, GDN_HEAD_MAP_GROUPED}) {
            SCOPED_TRACE(std::string(type_label(type)) + (heads == GDN_HEAD_MAP_TILED ? " tiled" : " grouped"));
            Sizes s;
            s.Sk = 4;
            s.Sv = 5;
            s.Hk = 2;
            s.Hv = 4;
            s.T = 6;
            s.B = 4;
            s.Bq = 2;
            s.heads = heads;
            const HostProblem shared = random_problem(s, type, 505);
            HostProblem repeated = shared;
            repeated.sizes.Bq = 4;
            repeated.q = gather(shared.q, 3, {0, 0, 1, 1});
            repeated.k = gather(shared.k, 3, {0, 0, 1, 1});

            RefContext ctx;
            const ForwardResult fs = forward(ctx.get(), shared), fr = forward(ctx.get(), repeated);
            EXPECT_SAME_BITS(fs.out, fr.out, "out");
            EXPECT_SAME_BITS(fs.states, fr.states, "states");

            const HostTensor d_out = random_tensor(type, fs.out.ne(), 11), d_states = random_tensor(type, fs.states.ne(), 12);
            const Gradients gs = backward(ctx.get(), shared, d_out, d_states), gr = backward(ctx.get(), repeated, d_out, d_states);
            EXPECT_SAME_BITS(gs.dv, gr.dv, "dv");
            EXPECT_SAME_BITS(gs.dg, gr.dg, "dg");
            EXPECT_SAME_BITS(gs.dbeta, gr.dbeta, "dbeta");
            EXPECT_SAME_BITS(gs.ds0, gr.ds0, "ds0");
            // Summed in another order; in F32 each repeat's gradient and their sum are rounded
            // (three half-ulps instead of one).
            const double tol = type == GDN_TYPE_F64 ? 1e-14 : 5e-7;
            EXPECT_LE(relative_difference(gs.dq, sum(gather(gr.dq, 3, {0, 2}), gather(gr.dq, 3, {1, 3}))), tol);
            EXPECT_LE(relative_difference(gs.dk, sum(gather(gr.dk, 3, {0, 2}), gather(gr.dk, 3, {1, 3}))), tol);
        }
}

}  // namespace
