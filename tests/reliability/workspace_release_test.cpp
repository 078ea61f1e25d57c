// gdn_context_release_workspace: the workspace a context keeps between calls is freed, the next
// call allocates it again and gives the same bits, on every host backend.
#include <gtest/gtest.h>

#include "dense_problem.h"

namespace {

using gdn::reliability::DenseProblem;
using gdn::reliability::Sizes;

TEST(ReleaseWorkspace, FreesAndTheNextCallAllocatesAgain) {
    for (const char *backend : {"ref", "cpu"}) {
        if (!gdn_backend_available(backend)) continue;
        SCOPED_TRACE(backend);
        gdn_context *ctx = gdn::reliability::make_context(backend, 2);
        Sizes s;
        s.T = 130;  // chunked on cpu
        DenseProblem first(s, GDN_TYPE_F32, 3), second(s, GDN_TYPE_F32, 3);
        ASSERT_EQ(first.backward(ctx), GDN_OK) << gdn_last_error(ctx);
        EXPECT_GT(gdn_context_workspace_bytes(ctx), 0u);
        gdn_context_release_workspace(ctx);
        EXPECT_EQ(gdn_context_workspace_bytes(ctx), 0u);
        ASSERT_EQ(second.backward(ctx), GDN_OK) << gdn_last_error(ctx);
        EXPECT_GT(gdn_context_workspace_bytes(ctx), 0u);
        EXPECT_TRUE(first.dq.same_bits(second.dq) && first.dv.same_bits(second.dv) && first.ds0.same_bits(second.ds0));
        gdn_context_release_workspace(ctx);
        gdn_context_release_workspace(ctx);  // twice: nothing left to free, no harm
        gdn_context_free(ctx);
    }
    gdn_context_release_workspace(nullptr);  // a NULL context is ignored
}

}  // namespace
