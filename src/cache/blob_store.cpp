#include "cache/blob_store.h"

#include <algorithm>
#include <cassert>
#include <string>
#include <unordered_set>

namespace skippy::cache {

blob_store::blob_store(size_t block_bytes) : block_bytes_(block_bytes) { assert(block_bytes > 0); }

std::vector<digest256> blob_store::block_digests(std::span<const uint8_t> data, size_t block_bytes) {
    assert(block_bytes > 0);
    std::vector<digest256> out;
    out.reserve((data.size() + block_bytes - 1) / block_bytes);
    for (size_t off = 0; off < data.size(); off += block_bytes) {
        out.push_back(sha256(data.subspan(off, std::min(block_bytes, data.size() - off))));
    }
    return out;
}

std::vector<blob_id> blob_store::put(std::span<const uint8_t> data) {
    return put(data, block_digests(data, block_bytes_));
}

std::vector<blob_id> blob_store::put(std::span<const uint8_t> data, std::span<const digest256> digests) {
    assert(digests.size() == (data.size() + block_bytes_ - 1) / block_bytes_);
    std::vector<blob_id> ids;
    ids.reserve(digests.size());
    for (size_t off = 0, i = 0; off < data.size(); off += block_bytes_, ++i) {
        std::span<const uint8_t> chunk = data.subspan(off, std::min(block_bytes_, data.size() - off));
        const digest256 & d = digests[i];
        auto it = by_digest_.find(d);
        blob_id id;
        if (it != by_digest_.end()) {
            id = it->second;
            ++n_dedupe_hits_;
        } else {
            id = next_id_++;
            block b;
            b.digest = d;
            b.bytes.assign(chunk.begin(), chunk.end());
            blocks_.emplace(id, std::move(b));
            by_digest_.emplace(d, id);
            physical_bytes_ += static_cast<int64_t>(chunk.size());
        }
        block & b = blocks_.at(id);
        ++b.refs;
        ++n_refs_;
        logical_bytes_ += static_cast<int64_t>(b.bytes.size());
        ids.push_back(id);
    }
    return ids;
}

int64_t blob_store::new_bytes_for(std::span<const uint8_t> data) const {
    int64_t n = 0;
    std::unordered_set<digest256, digest256_hash> seen;  // a block repeated within data counts once
    for (size_t off = 0; off < data.size(); off += block_bytes_) {
        std::span<const uint8_t> chunk = data.subspan(off, std::min(block_bytes_, data.size() - off));
        const digest256 d = sha256(chunk);
        if (!by_digest_.count(d) && seen.insert(d).second) n += static_cast<int64_t>(chunk.size());
    }
    return n;
}

bool blob_store::linked(blob_id id) const {
    auto it = blocks_.find(id);
    return it != blocks_.end() && it->second.linked;
}

status blob_store::retain(blob_id id) {
    auto it = blocks_.find(id);
    if (it == blocks_.end()) return make_error(error_code::not_found, "blob " + std::to_string(id) + " not held");
    ++it->second.refs;
    ++n_refs_;
    logical_bytes_ += static_cast<int64_t>(it->second.bytes.size());
    return status::ok();
}

status blob_store::release(blob_id id) {
    auto it = blocks_.find(id);
    if (it == blocks_.end() || it->second.refs <= 0) {
        ++n_underflows_;
        return make_error(error_code::internal, "release of blob " + std::to_string(id) + " that is not held");
    }
    block & b = it->second;
    --b.refs;
    --n_refs_;
    logical_bytes_ -= static_cast<int64_t>(b.bytes.size());
    if (b.refs == 0) {
        physical_bytes_ -= static_cast<int64_t>(b.bytes.size());
        if (b.linked) by_digest_.erase(b.digest);
        blocks_.erase(it);
    }
    return status::ok();
}

status blob_store::release_all(std::span<const blob_id> ids) {
    status first;
    for (blob_id id : ids) {
        status st = release(id);
        if (!st.is_ok() && first.is_ok()) first = st;
    }
    return first;
}

result<std::vector<uint8_t>> blob_store::read(std::span<const blob_id> ids) {
    std::vector<uint8_t> out;
    SKIPPY_TRY(read_into(ids, out));
    return out;
}

status blob_store::verify(std::span<const blob_id> ids) {
    status first;
    for (blob_id id : ids) {
        auto it = blocks_.find(id);
        if (it == blocks_.end()) {
            if (first.is_ok()) first = make_error(error_code::not_found, "blob " + std::to_string(id) + " not held");
            continue;
        }
        block & b = it->second;
        if (sha256(b.bytes) == b.digest) continue;
        ++n_integrity_failures_;
        if (b.linked) {
            by_digest_.erase(b.digest);
            b.linked = false;
        }
        if (first.is_ok()) first = make_error(error_code::integrity, "blob " + std::to_string(id) + " does not match its SHA-256 " + b.digest.hex(8));
    }
    return first;
}

status blob_store::read_into(std::span<const blob_id> ids, std::vector<uint8_t> & out, bool verify) {
    out.clear();
    // Sized once: a page of megabytes (a recurrent-state snapshot) grown block by block
    // would be copied, and its fresh memory faulted in, a dozen times over.
    size_t n_bytes = 0;
    for (blob_id id : ids) {
        auto it = blocks_.find(id);
        if (it != blocks_.end()) n_bytes += it->second.bytes.size();
    }
    out.reserve(n_bytes);
    for (blob_id id : ids) {
        auto it = blocks_.find(id);
        if (it == blocks_.end()) {
            out.clear();
            return make_error(error_code::not_found, "blob " + std::to_string(id) + " not held");
        }
        block & b = it->second;
        if (verify && sha256(b.bytes) != b.digest) {
            ++n_integrity_failures_;
            if (b.linked) {
                by_digest_.erase(b.digest);
                b.linked = false;
            }
            out.clear();
            return make_error(error_code::integrity, "blob " + std::to_string(id) + " does not match its SHA-256 " + b.digest.hex(8));
        }
        out.insert(out.end(), b.bytes.begin(), b.bytes.end());
    }
    return status::ok();
}

int64_t blob_store::unique_bytes(std::span<const blob_id> ids) const {
    std::unordered_set<blob_id> seen;
    int64_t n = 0;
    for (blob_id id : ids) {
        auto it = blocks_.find(id);
        if (it != blocks_.end() && seen.insert(id).second) n += static_cast<int64_t>(it->second.bytes.size());
    }
    return n;
}

blob_stats blob_store::stats() const {
    blob_stats s;
    s.n_blocks = static_cast<int64_t>(blocks_.size());
    s.physical_bytes = physical_bytes_;
    s.logical_bytes = logical_bytes_;
    s.n_refs = n_refs_;
    s.n_dedupe_hits = n_dedupe_hits_;
    s.n_integrity_failures = n_integrity_failures_;
    s.n_underflows = n_underflows_;
    return s;
}

status blob_store::check_invariants() const {
    int64_t physical = 0, logical = 0, refs = 0, linked = 0;
    for (const auto & [id, b] : blocks_) {
        if (b.refs <= 0) return make_error(error_code::internal, "blob invariant: stored block without references");
        if (b.bytes.empty() || b.bytes.size() > block_bytes_) return make_error(error_code::internal, "blob invariant: block size");
        physical += static_cast<int64_t>(b.bytes.size());
        logical += b.refs * static_cast<int64_t>(b.bytes.size());
        refs += b.refs;
        if (b.linked) {
            ++linked;
            auto it = by_digest_.find(b.digest);
            if (it == by_digest_.end() || it->second != id) return make_error(error_code::internal, "blob invariant: digest link");
        }
    }
    if (linked != static_cast<int64_t>(by_digest_.size())) return make_error(error_code::internal, "blob invariant: stale digest links");
    if (physical != physical_bytes_ || logical != logical_bytes_ || refs != n_refs_) {
        return make_error(error_code::internal, "blob invariant: byte or reference totals");
    }
    return status::ok();
}

bool blob_store::corrupt_for_testing(blob_id id, size_t offset) {
    auto it = blocks_.find(id);
    if (it == blocks_.end() || offset >= it->second.bytes.size()) return false;
    it->second.bytes[offset] ^= 0x01;
    return true;
}

}  // namespace skippy::cache
