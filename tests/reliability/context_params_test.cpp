// gdn_context_create at the limits of its parameters: thread counts (negative, past the cap,
// more than the system will start), chunk sizes (negative, 1, not a power of two, far past T)
// and device ordinals. Each ends in a context that computes what ref computes, or in an error
// status with a message naming the parameter, no context, and a process that goes on.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cctype>
#include <climits>
#include <cmath>
#include <cstdio>
#include <string>

#include "dense_problem.h"

namespace gdn::reliability {
namespace {

struct Created {
    gdn_status status;
    gdn_context *ctx;
    std::string message;
};

Created create(const char *backend, int n_threads, int chunk_size = 0, int device = 0) {
    gdn_context_params params = gdn_context_default_params();
    params.n_threads = n_threads;
    params.chunk_size = chunk_size;
    params.device = device;
    Created c{GDN_OK, nullptr, ""};
    c.status = gdn_context_create(backend, &params, &c.ctx);
    c.message = gdn_last_create_error();
    return c;
}

bool contains(const std::string &s, const std::string &part) { return s.find(part) != std::string::npos; }

void expect_refused(const Created &c, gdn_status status, const std::vector<std::string> &words) {
    EXPECT_EQ(c.status, status) << gdn_status_string(c.status) << ": " << c.message;
    EXPECT_EQ(c.ctx, nullptr);
    std::string lower = c.message;  // "cuda" may be spelt CUDA
    for (char &ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    for (const std::string &w : words) EXPECT_TRUE(contains(lower, w)) << "\"" << c.message << "\" lacks " << w;
    gdn_context_free(c.ctx);
}

TEST(ContextParams, ThreadCountsPastTheCapAreRefusedNamingIt) {
    const std::string cap = std::to_string(GDN_MAX_THREADS);
    for (int n : {GDN_MAX_THREADS + 1, 100000, INT_MAX}) {
        for (const char *backend : {"cpu", "ref", static_cast<const char *>(nullptr)}) {
            SCOPED_TRACE(std::string(backend ? backend : "NULL") + " n_threads=" + std::to_string(n));
            expect_refused(create(backend, n), GDN_ERROR_INVALID_ARGUMENT, {"n_threads = " + std::to_string(n), cap});
        }
    }
}

TEST(ContextParams, NegativeThreadCountsAreRefused) {
    for (int n : {-1, -4096, INT_MIN}) {
        SCOPED_TRACE(n);
        expect_refused(create("cpu", n), GDN_ERROR_INVALID_ARGUMENT, {"n_threads = " + std::to_string(n), "negative"});
    }
}

// The largest forward output difference from ref, relative to ref's largest magnitude.
double forward_error_against_ref(gdn_context *ctx, const Sizes &s) {
    DenseProblem got(s, GDN_TYPE_F32, 7), want(s, GDN_TYPE_F32, 7);
    EXPECT_EQ(got.forward(ctx), GDN_OK) << gdn_last_error(ctx);
    gdn_context *ref = make_context("ref");
    EXPECT_EQ(want.forward(ref), GDN_OK) << gdn_last_error(ref);
    gdn_context_free(ref);
    double worst = 0, scale = 0;
    for (int64_t i = 0; i < want.out.count(); ++i) {
        scale = std::max(scale, std::fabs(want.out.get(i)));
        worst = std::max(worst, std::fabs(got.out.get(i) - want.out.get(i)));
    }
    for (int64_t i = 0; i < want.states.count(); ++i) worst = std::max(worst, std::fabs(got.states.get(i) - want.states.get(i)));
    return worst / scale;
}

// The cap itself runs, and gives what one thread gives, bit for bit.
TEST(ContextParams, TheCapItselfRunsAndMatchesOneThread) {
    if (!gdn_backend_available("cpu")) GTEST_SKIP() << "no cpu backend";
    Sizes s;
    s.Hk = 2;
    s.Hv = 4;
    s.T = 40;
    s.B = s.Bq = 3;
    DenseProblem at_cap(s, GDN_TYPE_F32, 3), single(s, GDN_TYPE_F32, 3);
    gdn_context *wide = make_context("cpu", GDN_MAX_THREADS), *one = make_context("cpu", 1);
    ASSERT_NE(wide, nullptr);
    ASSERT_EQ(at_cap.forward(wide), GDN_OK) << gdn_last_error(wide);
    ASSERT_EQ(single.forward(one), GDN_OK) << gdn_last_error(one);
    EXPECT_TRUE(at_cap.out.same_bits(single.out));
    EXPECT_TRUE(at_cap.states.same_bits(single.states));
    gdn_context_free(wide);
    gdn_context_free(one);
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define GDN_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define GDN_SANITIZED 1
#endif
#endif

#ifndef GDN_SANITIZED
// Runs in a child process: caps its address space just above what it uses, so that the system
// refuses the threads' stacks (8 MiB or more each), asks for 512 threads, then for one. Exits 0
// when the first create failed cleanly and the second worked.
[[noreturn]] void create_with_capped_address_space() {
    alarm(60);  // a create that hangs (destroying a condition variable its workers wait on) fails too
    long pages = 0;
    FILE *statm = std::fopen("/proc/self/statm", "r");
    if (statm == nullptr || std::fscanf(statm, "%ld", &pages) != 1) std::_Exit(3);
    std::fclose(statm);
    const rlim_t cap = static_cast<rlim_t>(pages) * 4096 + (rlim_t{64} << 20);
    const rlimit limit{cap, cap};
    if (setrlimit(RLIMIT_AS, &limit) != 0) std::_Exit(4);
    const Created many = create("cpu", 512);
    if (many.status != GDN_ERROR_BACKEND || many.ctx != nullptr || !contains(many.message, "512 threads")) {
        std::fprintf(stderr, "got %s: %s\n", gdn_status_string(many.status), many.message.c_str());
        std::_Exit(5);
    }
    const Created one = create("cpu", 1);
    std::_Exit(one.status == GDN_OK ? 0 : 6);
}
#endif

// Threads the system cannot start: GDN_ERROR_BACKEND, the threads already started joined (no
// std::terminate), and the process can go on.
TEST(ContextParams, ThreadsTheSystemCannotStartFailCleanly) {
#ifdef GDN_SANITIZED
    GTEST_SKIP() << "a sanitizer runtime reserves address space the cap would take from it";
#else
    if (!gdn_backend_available("cpu")) GTEST_SKIP() << "no cpu backend";
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_EXIT(create_with_capped_address_space(), ::testing::ExitedWithCode(0), "");
#endif
}

TEST(ContextParams, ChunkSizesAnyPositiveValueComputesWhatRefDoes) {
    if (!gdn_backend_available("cpu")) GTEST_SKIP() << "no cpu backend";
    Sizes s;
    s.Sk = s.Sv = 8;
    s.T = 37;  // a prime: no chunk size but 1 and 37 divides it
    for (int chunk : {1, 2, 3, 5, 16, 36, 37, 38, 100, 1 << 20, INT_MAX}) {
        SCOPED_TRACE(chunk);
        const Created c = create("cpu", 2, chunk);
        ASSERT_EQ(c.status, GDN_OK) << c.message;
        EXPECT_LT(forward_error_against_ref(c.ctx, s), 1e-5);
        gdn_context_free(c.ctx);
    }
}

// A chunk longer than the call is the call in one chunk: the same bits as chunk_size = T.
TEST(ContextParams, ChunkSizesPastTAreOneChunk) {
    if (!gdn_backend_available("cpu")) GTEST_SKIP() << "no cpu backend";
    Sizes s;
    s.T = 50;
    DenseProblem exact(s, GDN_TYPE_F32, 5);
    const Created at_t = create("cpu", 1, 50);
    ASSERT_EQ(exact.forward(at_t.ctx), GDN_OK);
    for (int chunk : {51, 1 << 20, INT_MAX}) {
        DenseProblem past(s, GDN_TYPE_F32, 5);
        const Created c = create("cpu", 1, chunk);
        ASSERT_EQ(past.forward(c.ctx), GDN_OK) << gdn_last_error(c.ctx);
        EXPECT_TRUE(past.out.same_bits(exact.out)) << chunk;
        gdn_context_free(c.ctx);
    }
    gdn_context_free(at_t.ctx);
}

TEST(ContextParams, NegativeChunkSizesAreRefused) {
    for (int chunk : {-1, -64, INT_MIN}) {
        for (const char *backend : {"cpu", "ref", "cuda"}) {
            SCOPED_TRACE(std::string(backend) + " chunk_size=" + std::to_string(chunk));
            expect_refused(create(backend, 0, chunk), GDN_ERROR_INVALID_ARGUMENT, {"chunk_size = " + std::to_string(chunk)});
        }
    }
}

TEST(ContextParams, NegativeDevicesAreRefused) {
    for (int device : {-1, INT_MIN}) {
        SCOPED_TRACE(device);
        expect_refused(create("cuda", 0, 0, device), GDN_ERROR_INVALID_ARGUMENT, {"device = " + std::to_string(device)});
    }
}

// A device that does not exist: the cuda backend cannot start (and says why); the host
// backends ignore the field.
TEST(ContextParams, DevicesThatDoNotExist) {
    for (int device : {1000, INT_MAX}) {
        SCOPED_TRACE(device);
        expect_refused(create("cuda", 0, 0, device), GDN_ERROR_BACKEND, {"cuda"});
        for (const char *backend : {"cpu", "ref"}) {
            const Created c = create(backend, 1, 0, device);
            EXPECT_EQ(c.status, GDN_OK) << backend << ": " << c.message;
            gdn_context_free(c.ctx);
        }
    }
}

}  // namespace
}  // namespace gdn::reliability
