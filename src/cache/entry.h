// Ids and kinds of cache entries, shared by the index and the tiers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace skippy::cache {

// A radix node may hold one entry of each kind (DESIGN §6 "Index").
enum class entry_kind : uint8_t {
    resident = 0,     // KV blocks kept in the stage's live pool
    exact_state = 1,  // serialized KV pages in the blob store
    disk = 2,         // page files of the disk tier (its own index: disk_store)
};
inline constexpr size_t n_entry_kinds = 3;

inline std::string_view entry_kind_name(entry_kind k) {
    return k == entry_kind::resident ? "resident" : k == entry_kind::exact_state ? "exact_state" : "disk";
}

// Unique within one radix_index for its lifetime; never reused.
using entry_id = uint64_t;
inline constexpr entry_id no_entry = 0;

}  // namespace skippy::cache
