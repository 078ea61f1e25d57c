// Counts the largest single operator new request made while a scope is open, so that a test
// can assert "no allocation was attempted" for inputs whose sizes are absurd; and refuses
// requests over a size while a scope is open. The counting
// operator new lives in big_allocations.cpp and replaces the global one in the test binary
// (the library is linked statically, so its std::vector allocations go through it too).
#pragma once

#include <cstddef>

namespace gdn::reliability {

class LargestAllocation {
public:
    LargestAllocation();   // resets the running maximum
    size_t bytes() const;  // the largest request since construction
};

// While in scope, every operator new request over `bytes` fails (std::bad_alloc, or nullptr for
// the nothrow forms), as on a machine out of memory: what a call does when an allocation fails.
class RefuseAllocationsOver {
public:
    explicit RefuseAllocationsOver(size_t bytes);
    ~RefuseAllocationsOver();
    RefuseAllocationsOver(const RefuseAllocationsOver &) = delete;
    RefuseAllocationsOver &operator=(const RefuseAllocationsOver &) = delete;
};

}  // namespace gdn::reliability
