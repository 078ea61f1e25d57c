// The error messages that README.md and docs/SPEC.md quote are the library's own. Each bad call
// a document describes is made here through the public API; its gdn_last_error must appear in
// the document verbatim (between backticks, whatever the line breaks), and every quoted message
// of the form `tensor.ne[i] = ...` or `tensor.nb[i] = ...` in the document must be one that a
// call here gives. An example whose numbers or wording drift from the library fails the test.
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <gdn/gdn.h>

#include "case.h"
#include "memory.h"
#include "problem_data.h"
#include "tensor_set.h"

namespace {

struct BadCall {
    const char *what;
    int64_t Hk, Hv;  // everything else valid: Sk = Sv = 128, T = 4, B = 1
    gdn_status status;
};

// The bad calls the documents describe: 5 key heads cannot be shared by 48 value heads.
const BadCall kHeadsDoNotDivide{"Hk = 5 key heads with Hv = 48 value heads", 5, 48, GDN_ERROR_SHAPE};

struct Document {
    const char *path;  // relative to the source tree
    std::vector<BadCall> calls;
};

const std::vector<Document> kDocuments = {
    {"README.md", {kHeadsDoNotDivide}},
    {"docs/SPEC.md", {kHeadsDoNotDivide}},
};

// gdn_forward's message for `call` on the ref backend, after checking its status: the inputs and
// outputs of a valid call with Hk = 16 (the testkit's, poisoned and guarded), then q and k given
// the call's key heads (fewer, so the views stay inside their buffers).
std::string message_of(const BadCall &call) {
    gdn::testkit::Case c;
    c.op = gdn::testkit::Op::Forward;
    c.shape = {128, 128, 16, call.Hv, 4, 1, 1, 1};  // Sk, Sv, Hk, Hv, T, B, Bq, K
    gdn::testkit::TensorSet inputs = gdn::testkit::make_inputs(c, GDN_TYPE_F32, 1);
    gdn::testkit::TensorSet outputs = gdn::testkit::make_outputs(c, GDN_TYPE_F32);
    const gdn::testkit::Mirror input_views(inputs, gdn::testkit::host_memory());
    gdn_problem p = gdn::testkit::problem_of(c, input_views);
    p.q.ne[1] = p.k.ne[1] = call.Hk;
    gdn_tensor out = outputs.host("out"), states = outputs.host("states");

    gdn_context *ctx = nullptr;
    EXPECT_EQ(gdn_context_create("ref", nullptr, &ctx), GDN_OK);
    if (ctx == nullptr) return {};
    EXPECT_EQ(gdn_forward(ctx, &p, &out, &states), call.status) << call.what;
    const std::string message = gdn_last_error(ctx);
    gdn_context_free(ctx);
    return message;
}

// The document's prose (fenced code blocks left out: their backticks do not pair with the
// prose's) with every run of white space, line breaks included, as one space.
std::string read_flattened(const std::string &path) {
    std::ifstream in(path);
    EXPECT_TRUE(in.good()) << "cannot read " << path;
    std::string prose, line;
    bool in_fence = false;
    while (std::getline(in, line)) {
        const bool fence = line.find_first_not_of(' ') != std::string::npos &&
                           line.compare(line.find_first_not_of(' '), 3, "```") == 0;
        if (fence) in_fence = !in_fence;
        else if (!in_fence) prose += line + "\n";
    }
    return std::regex_replace(prose, std::regex("\\s+"), " ");
}

// Every backticked span that reads like a tensor's error message.
std::set<std::string> quoted_messages(const std::string &text) {
    static const std::regex span("`([^`]+)`"), message("^[a-z_0-9]+\\.(ne|nb)\\[[0-3]\\] = -?[0-9]+ .*");
    std::set<std::string> found;
    for (auto it = std::sregex_iterator(text.begin(), text.end(), span); it != std::sregex_iterator(); ++it) {
        const std::string quoted = (*it)[1].str();
        if (std::regex_match(quoted, message)) found.insert(quoted);
    }
    return found;
}

TEST(DocumentedErrors, EveryQuotedMessageIsTheLibrarysOwn) {
    for (const Document &doc : kDocuments) {
        SCOPED_TRACE(doc.path);
        const std::set<std::string> quoted = quoted_messages(read_flattened(std::string(GDN_SOURCE_DIR) + "/" + doc.path));
        std::set<std::string> given;
        for (const BadCall &call : doc.calls) {
            const std::string message = message_of(call);
            given.insert(message);
            EXPECT_EQ(quoted.count(message), 1u) << doc.path << " should quote, for " << call.what << ":\n  `"
                                                << message << "`";
        }
        for (const std::string &q : quoted)
            EXPECT_EQ(given.count(q), 1u) << doc.path << " quotes `" << q << "`, which no bad call here gives";
    }
}

// The extraction itself: a message split over lines is found, and one with other numbers is not
// the library's.
TEST(DocumentedErrors, QuotedMessagesAreFoundAcrossLineBreaks) {
    const std::set<std::string> quoted =
        quoted_messages(std::regex_replace(std::string("names it (`q.ne[1] = 8 does not\n   divide v.ne[1] = 48`) and "
                                                       "`gdn_last_error`"),
                                           std::regex("\\s+"), " "));
    ASSERT_EQ(quoted.size(), 1u);
    EXPECT_EQ(*quoted.begin(), "q.ne[1] = 8 does not divide v.ne[1] = 48");
    EXPECT_NE(*quoted.begin(), message_of(kHeadsDoNotDivide));
}

}  // namespace
