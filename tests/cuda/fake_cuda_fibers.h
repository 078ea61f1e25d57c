// The CUDA threads of one emulated block (fake_cuda.h) as fibers: user-level contexts on the
// launching thread, each with a stack of its own, run in turn by a scheduler loop. A fiber runs
// until it waits at a barrier (FiberBarrier) or returns; a barrier lets its fibers go on once all
// its participants have arrived, as std::barrier does, with no OS thread woken. Threads are
// resumed in order 0, 1, 2, ..., so a run is deterministic. A block whose threads wait at
// barriers that the others never reach (a hang on a GPU too) stops the process with a message
// instead of hanging.
#pragma once

#include <sys/mman.h>
#include <ucontext.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace fake_cuda {

class FiberTeam;
inline thread_local FiberTeam *running_team = nullptr;  // the launch in progress on this thread

// Fibers for blocks of `threads` CUDA threads; run() runs one block, and may be called again for
// the next (the stacks are kept).
class FiberTeam {
public:
    explicit FiberTeam(int threads)
        : threads_(threads), contexts_(static_cast<size_t>(threads)), done_(static_cast<size_t>(threads)) {
        // Stacks grow down: each slot is a guard page, then the stack above it.
        bytes_ = static_cast<size_t>(threads) * kSlotBytes;
        void *p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) fail("cannot map the fibers' stacks");
        stacks_ = static_cast<char *>(p);
        for (int t = 0; t < threads; ++t)
            if (mprotect(stacks_ + static_cast<size_t>(t) * kSlotBytes, kGuardBytes, PROT_NONE) != 0)
                fail("cannot protect a stack's guard page");
    }
    ~FiberTeam() { munmap(stacks_, bytes_); }
    FiberTeam(const FiberTeam &) = delete;
    FiberTeam &operator=(const FiberTeam &) = delete;

    // Runs body() once on every fiber to completion; enter(t) is called before fiber t is resumed
    // (to set what the fiber reads as its own: threadIdx).
    template <class Body, class Enter>
    void run(Body &body, Enter enter) {
        body_ = &body;
        call_ = [](void *b) { (*static_cast<Body *>(b))(); };
        FiberTeam *outer = running_team;
        running_team = this;
        for (int t = 0; t < threads_; ++t) {
            ucontext_t &c = contexts_[static_cast<size_t>(t)];
            getcontext(&c);
            c.uc_stack.ss_sp = stacks_ + static_cast<size_t>(t) * kSlotBytes + kGuardBytes;
            c.uc_stack.ss_size = kStackBytes;
            c.uc_link = &scheduler_;
            makecontext(&c, &FiberTeam::entry, 0);
            done_[static_cast<size_t>(t)] = 0;
        }
        for (int left = threads_; left > 0;) {
            const uint64_t before = progress_;
            for (int t = 0; t < threads_; ++t) {
                if (done_[static_cast<size_t>(t)]) continue;
                current_ = t;
                enter(t);
                swapcontext(&scheduler_, &contexts_[static_cast<size_t>(t)]);
                if (done_[static_cast<size_t>(t)]) --left;
            }
            if (left > 0 && progress_ == before)
                fail("deadlock: threads of a block wait at a barrier that the others never reach");
        }
        running_team = outer;
    }

    // A fiber waiting at a barrier hands the thread back to the scheduler.
    void yield() { swapcontext(&contexts_[static_cast<size_t>(current_)], &scheduler_); }
    // Something changed that may let a waiting fiber go on (an arrival at a barrier).
    void progress() { ++progress_; }

private:
    static constexpr size_t kGuardBytes = 4096, kStackBytes = 512 << 10, kSlotBytes = kGuardBytes + kStackBytes;

    static void entry() {
        FiberTeam &team = *running_team;
        team.call_(team.body_);
        team.done_[static_cast<size_t>(team.current_)] = 1;
        ++team.progress_;
    }  // returns to uc_link: the scheduler
    [[noreturn]] static void fail(const char *what) {
        std::fprintf(stderr, "fake_cuda: %s\n", what);
        std::abort();
    }

    int threads_, current_ = 0;
    std::vector<ucontext_t> contexts_;
    std::vector<char> done_;
    ucontext_t scheduler_{};
    char *stacks_ = nullptr;
    size_t bytes_ = 0;
    uint64_t progress_ = 0;
    void *body_ = nullptr;
    void (*call_)(void *) = nullptr;
};

// std::barrier's arrive_and_wait for fibers of the running team.
class FiberBarrier {
public:
    explicit FiberBarrier(int participants) : participants_(participants) {}
    void arrive_and_wait() {
        const uint64_t generation = generation_;
        running_team->progress();
        if (++arrived_ == participants_) {
            arrived_ = 0;
            ++generation_;
            return;
        }
        while (generation_ == generation) running_team->yield();
    }

private:
    int participants_, arrived_ = 0;
    uint64_t generation_ = 0;
};

}  // namespace fake_cuda
