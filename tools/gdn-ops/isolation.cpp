#include "isolation.h"

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "modes.h"

namespace gdn::ops {
namespace {

// ---- The worker's messages to the parent: 'B' index (begins an item), 'R' index record
// ---- (finished it). Little-endian host order: both ends are the same binary.

void put_u64(std::string &buf, uint64_t x) { buf.append(reinterpret_cast<const char *>(&x), sizeof x); }
void put_string(std::string &buf, const std::string &s) {
    put_u64(buf, s.size());
    buf += s;
}

class Reader {
public:
    explicit Reader(const std::string &buf) : buf_(buf) {}
    uint64_t u64() {
        uint64_t x;
        take(&x, sizeof x);
        return x;
    }
    std::string string() {
        const uint64_t n = u64();
        if (n > buf_.size() - at_) throw std::runtime_error("truncated message");
        std::string s = buf_.substr(at_, n);
        at_ += n;
        return s;
    }
    double f64() {
        double x;
        take(&x, sizeof x);
        return x;
    }

private:
    void take(void *dst, size_t n) {
        if (n > buf_.size() - at_) throw std::runtime_error("truncated message");
        std::memcpy(dst, buf_.data() + at_, n);
        at_ += n;
    }
    const std::string &buf_;
    size_t at_ = 0;
};

std::string encode_record(const Record &r) {
    std::string buf;
    put_string(buf, r.backend);
    put_string(buf, r.label);
    put_string(buf, r.group);
    put_u64(buf, static_cast<uint64_t>(r.verdict));
    put_string(buf, r.note);
    put_u64(buf, r.values.size());
    for (const auto &[name, value] : r.values) {
        put_string(buf, name);
        buf.append(reinterpret_cast<const char *>(&value), sizeof value);
    }
    return buf;
}

Record decode_record(Reader &in) {
    Record r;
    r.backend = in.string();
    r.label = in.string();
    r.group = in.string();
    r.verdict = static_cast<Verdict>(in.u64());
    r.note = in.string();
    const uint64_t n = in.u64();
    for (uint64_t i = 0; i < n; ++i) {
        std::string name = in.string();
        r.values.emplace_back(std::move(name), in.f64());
    }
    return r;
}

bool write_all(int fd, const std::string &bytes) {
    size_t done = 0;
    while (done < bytes.size()) {
        const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;
        done += static_cast<size_t>(n);
    }
    return true;
}

// A frame: its length, then its bytes. False at end of file (or a torn frame: the writer died).
bool read_frame(int fd, std::string &out) {
    auto read_exact = [fd](void *dst, size_t n) {
        size_t done = 0;
        while (done < n) {
            const ssize_t r = ::read(fd, static_cast<char *>(dst) + done, n - done);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) return false;
            done += static_cast<size_t>(r);
        }
        return true;
    };
    uint64_t n = 0;
    if (!read_exact(&n, sizeof n) || n > (1u << 30)) return false;
    out.resize(n);
    return read_exact(out.data(), n);
}

bool send_frame(int fd, const std::string &payload) {
    std::string frame;
    put_u64(frame, payload.size());
    return write_all(fd, frame + payload);
}

// The worker: items first .. count-1, in order, until done or its memory is suspect.
[[noreturn]] void worker_main(int fd, const ItemPlan &plan, size_t first) {
    {
        std::unique_ptr<ItemRunner> runner = plan.make_runner();
        for (size_t i = first; i < plan.count; ++i) {
            std::string begin = "B";
            put_u64(begin, i);
            if (!send_frame(fd, begin)) _exit(3);
            bool suspect = false;
            const std::optional<Record> rec = runner->run(i, suspect);
            std::string done = "R";
            put_u64(done, i);
            put_u64(done, rec ? 1 : 0);
            if (rec) done += encode_record(*rec);
            if (!send_frame(fd, done)) _exit(3);
            if (suspect) _exit(0);  // skip the destructors: the heap may be damaged
        }
    }
    std::fflush(stderr);
    _exit(0);
}

// Prints the backend headings and summaries around the records, which arrive in item order.
class Printer {
public:
    explicit Printer(Report &report) : report_(report) {}
    void add(const Record &r) {
        if (!open_ || backend_ != r.backend) {
            close();
            backend_ = r.backend;
            open_ = true;
            report_.say("Backend " + r.backend + ":");
        }
        report_.add(r);
    }
    void close() {
        if (open_) report_.backend_summary(backend_);
        open_ = false;
    }

private:
    Report &report_;
    bool open_ = false;  // a heading was printed for backend_
    std::string backend_;
};

void run_in_process(Printer &printer, const ItemPlan &plan) {
    std::unique_ptr<ItemRunner> runner = plan.make_runner();
    for (size_t i = 0; i < plan.count; ++i) {
        bool suspect = false;
        if (std::optional<Record> rec = runner->run(i, suspect)) printer.add(*rec);
    }
}

void run_in_workers(Printer &printer, const ItemPlan &plan) {
    size_t next = 0;
    while (next < plan.count) {
        std::fflush(stdout);
        std::fflush(stderr);
        int fds[2];
        if (::pipe(fds) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
        const pid_t pid = ::fork();
        if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
        if (pid == 0) {
            ::close(fds[0]);
            worker_main(fds[1], plan, next);
        }
        ::close(fds[1]);
        bool running = false;  // began item `current` and has not finished it
        size_t current = 0;
        bool started_any = false;
        std::string frame;
        try {
            while (read_frame(fds[0], frame) && !frame.empty()) {
                const std::string rest = frame.substr(1);
                Reader body(rest);
                const size_t index = body.u64();
                if (frame[0] == 'B') {
                    running = started_any = true;
                    current = index;
                } else if (frame[0] == 'R') {
                    if (body.u64()) printer.add(decode_record(body));
                    running = false;
                    next = index + 1;
                }
            }
        } catch (const std::runtime_error &) {
            ::kill(pid, SIGKILL);  // a garbled message: treat the worker as dead
        }
        ::close(fds[0]);
        int status = 0;
        while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        const bool clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        if (running) {
            Record r = plan.describe(current);
            r.verdict = Verdict::Fail;
            r.note = "the case's process died: " + describe_wait_status(status) + " (the run goes on in a fresh process)";
            printer.add(r);
            next = current + 1;
        } else if (!clean) {
            // Died outside a case (starting up, or after its last case): say so; when it never
            // began an item, that item is the one charged, so the run always moves on.
            Record r = plan.describe(next < plan.count ? next : plan.count - 1);
            r.verdict = Verdict::Fail;
            r.note = "the worker process died outside a case: " + describe_wait_status(status);
            printer.add(r);
            if (!started_any) ++next;
        }
    }
}

}  // namespace

std::string describe_wait_status(int status) {
    if (WIFSIGNALED(status)) {
        const int sig = WTERMSIG(status);
        return "signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
    }
    if (WIFEXITED(status)) return "exit status " + std::to_string(WEXITSTATUS(status));
    return "wait status " + std::to_string(status);
}

void run_items(Report &report, const ItemPlan &plan, bool isolate) {
    Printer printer(report);
    if (isolate) run_in_workers(printer, plan);
    else run_in_process(printer, plan);
    printer.close();
}

bool chosen_backends_isolated(const Options &o, bool with_ref_by_default, std::vector<testkit::BackendSpec> &out) {
    if (!o.isolate || !o.backends.empty()) return chosen_backends(o, with_ref_by_default, out);
    // Probing CUDA devices initialises the driver, which a forked child cannot use afterwards:
    // probe in a child of its own and read the labels back.
    std::fflush(stdout);
    std::fflush(stderr);
    int fds[2];
    if (::pipe(fds) != 0) return chosen_backends(o, with_ref_by_default, out);
    const pid_t pid = ::fork();
    if (pid < 0) {
        ::close(fds[0]);
        ::close(fds[1]);
        return chosen_backends(o, with_ref_by_default, out);
    }
    if (pid == 0) {
        ::close(fds[0]);
        std::vector<testkit::BackendSpec> found;
        chosen_backends(o, with_ref_by_default, found);
        std::string labels;
        for (const auto &b : found) labels += b.label + "\n";
        _exit(send_frame(fds[1], labels) ? 0 : 3);
    }
    ::close(fds[1]);
    std::string labels;
    const bool got = read_frame(fds[0], labels);
    ::close(fds[0]);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!got) {
        std::fprintf(stderr, "gdn-ops: probing the backends failed: %s\n", describe_wait_status(status).c_str());
        return false;
    }
    out.clear();
    size_t start = 0;
    while (start < labels.size()) {
        const size_t end = labels.find('\n', start);
        testkit::BackendSpec spec;
        if (testkit::parse_backend(labels.substr(start, end - start), spec)) out.push_back(spec);
        start = end + 1;
    }
    return true;
}

}  // namespace gdn::ops
