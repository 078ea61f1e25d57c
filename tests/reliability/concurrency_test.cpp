// Threads (gdn.h, docs/RELIABILITY.md): a context is used by one thread at a time; distinct
// contexts may run concurrently, also on shared read-only inputs. Eight threads on eight
// contexts must give exactly the bits of one thread alone. Uses the cpu backend (itself
// multithreaded) when this build has it, else ref. Run under ThreadSanitizer by
// scripts/ci-sanitizers.sh.
#include <gtest/gtest.h>

#include <mutex>
#include <thread>
#include <vector>

#include "dense_problem.h"

namespace gdn::reliability {
namespace {

constexpr int kThreads = 8;
constexpr int kRounds = 3;

Sizes shape() {
    Sizes s;
    s.Sk = 16;
    s.Sv = 16;
    s.Hk = 2;
    s.Hv = 4;
    s.T = 70;  // more than one chunk on a chunked backend
    s.B = 2;
    s.Bq = 1;
    s.K = 2;
    return s;
}

// Every output of a forward and a backward, as one comparable set.
struct Results {
    std::vector<Buffer> outputs;
    bool operator==(const Results &o) const {
        if (outputs.size() != o.outputs.size()) return false;
        for (size_t i = 0; i < outputs.size(); ++i)
            if (!outputs[i].same_bits(o.outputs[i])) return false;
        return true;
    }
};

// Runs forward and backward of `inputs` (read only, shared) into fresh outputs.
Results run(gdn_context *ctx, const DenseProblem &inputs) {
    DenseProblem p = inputs;  // copies; the outputs below are this thread's own
    gdn_problem prob = const_cast<DenseProblem &>(inputs).problem();  // the shared inputs themselves
    const gdn_tensor out = p.out.tensor(), states = p.states.tensor();
    const gdn_tensor d_out = const_cast<DenseProblem &>(inputs).d_out.tensor();
    const gdn_tensor d_states = const_cast<DenseProblem &>(inputs).d_states.tensor();
    const gdn_grads grads = p.grads();
    EXPECT_EQ(gdn_forward(ctx, &prob, &out, &states), GDN_OK) << gdn_last_error(ctx);
    EXPECT_EQ(gdn_backward(ctx, &prob, &d_out, &d_states, &grads), GDN_OK) << gdn_last_error(ctx);
    return Results{{p.out, p.states, p.dq, p.dk, p.dv, p.dg, p.dbeta, p.ds0}};
}

TEST(Concurrency, EightThreadsOnEightContextsMatchOneThread) {
    const char *backend = threaded_backend();
    RecordProperty("backend", backend);
    const DenseProblem inputs(shape(), GDN_TYPE_F32, 2024);

    gdn_context *alone = make_context(backend, 2);
    ASSERT_NE(alone, nullptr);
    const Results expected = run(alone, inputs);
    gdn_context_free(alone);

    std::vector<Results> got(kThreads * kRounds);
    std::vector<std::thread> threads;
    for (int i = 0; i < kThreads; ++i)
        threads.emplace_back([&, i] {
            gdn_context *ctx = make_context(backend, 2);  // each context may run its own workers
            for (int round = 0; round < kRounds; ++round) got[i * kRounds + round] = run(ctx, inputs);
            gdn_context_free(ctx);
        });
    for (auto &t : threads) t.join();
    for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(got[i] == expected) << "thread " << i / kRounds << " round " << i % kRounds;
}

// One context shared by threads that take a lock around each call: allowed, and identical.
TEST(Concurrency, OneContextBehindALockMatchesOneThread) {
    const char *backend = threaded_backend();
    const DenseProblem inputs(shape(), GDN_TYPE_F32, 77);
    gdn_context *ctx = make_context(backend, 2);
    ASSERT_NE(ctx, nullptr);
    const Results expected = run(ctx, inputs);
    std::mutex lock;
    std::vector<Results> got(kThreads);
    std::vector<std::thread> threads;
    for (int i = 0; i < kThreads; ++i)
        threads.emplace_back([&, i] {
            std::lock_guard<std::mutex> hold(lock);
            got[i] = run(ctx, inputs);
        });
    for (auto &t : threads) t.join();
    gdn_context_free(ctx);
    for (int i = 0; i < kThreads; ++i) EXPECT_TRUE(got[i] == expected) << "thread " << i;
}

// Errors are per context: a failing call on one context does not change another's message,
// and gdn_last_create_error is per thread.
TEST(Concurrency, ErrorMessagesArePerContextAndPerThread) {
    static constexpr int64_t kBadKeyHeads[kThreads] = {3, 5, 6, 7, 9, 10, 11, 13};  // none divides Hv = 4
    std::vector<std::thread> threads;
    std::vector<std::string> create_errors(kThreads), call_errors(kThreads);
    for (int i = 0; i < kThreads; ++i)
        threads.emplace_back([&, i] {
            gdn_context *bad = nullptr;
            const std::string name = "no-such-backend-" + std::to_string(i);
            EXPECT_EQ(gdn_context_create(name.c_str(), nullptr, &bad), GDN_ERROR_UNKNOWN_BACKEND);
            create_errors[i] = gdn_last_create_error();
            gdn_context *ctx = make_context("ref");
            DenseProblem p(shape(), GDN_TYPE_F32, 1);
            p.q.ne[1] = p.k.ne[1] = kBadKeyHeads[i];  // a different wrong shape per thread (Hv = 4)
            for (int round = 0; round < 20; ++round) {
                gdn_problem prob = p.problem();
                const gdn_tensor out = p.out.tensor();
                EXPECT_EQ(gdn_forward(ctx, &prob, &out, nullptr), GDN_ERROR_SHAPE);
            }
            call_errors[i] = gdn_last_error(ctx);
            gdn_context_free(ctx);
        });
    for (auto &t : threads) t.join();
    for (int i = 0; i < kThreads; ++i) {
        EXPECT_NE(create_errors[i].find("no-such-backend-" + std::to_string(i)), std::string::npos) << create_errors[i];
        EXPECT_NE(call_errors[i].find("q.ne[1] = " + std::to_string(kBadKeyHeads[i]) + " does not divide"), std::string::npos)
            << call_errors[i];
    }
}

}  // namespace
}  // namespace gdn::reliability
