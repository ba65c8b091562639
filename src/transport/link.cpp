#include "transport/link.h"

#include <algorithm>
#include <map>
#include <thread>

namespace skippy::transport {

status stage_link::annotate(const status & st) const {
    return st.is_ok() ? st : st.with_context(peer_name_);
}

status stage_link::write_frame(std::vector<uint8_t> bytes) {
    if (!socket_.valid()) return make_error(error_code::unavailable, peer_name_ + ": not connected");
    if (macs_.on()) {
        auto tag = macs_.send.seal(bytes);
        if (!tag.is_ok()) return annotate(tag.error());
        bytes.insert(bytes.end(), tag->begin(), tag->end());
    }
    if (options_.wire_delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(options_.wire_delay_ms));
    return annotate(socket_.write_all(bytes, clock::now() + options_.frame_timeout));
}

status stage_link::send_request(const protocol::request & r) {
    SKIPPY_TRY(protocol::validate_request(r, options_.limits));
    return write_frame(protocol::encode_request(r));
}

status stage_link::send_step(const protocol::step_frame & s) {
    SKIPPY_TRY(protocol::validate_step(s, options_.limits));
    return write_frame(protocol::encode_step(s));
}

status stage_link::send_reply(const protocol::reply & r) {
    SKIPPY_TRY(protocol::validate_reply(r, options_.limits));
    return write_frame(protocol::encode_reply(r));
}

void stage_link::fail(uint64_t request_id, const status & st) {
    if (socket_.valid()) {
        (void)send_reply(protocol::make_error_reply(request_id, st, options_.limits));
    }
    socket_.close();
}

namespace {

// One frame off `socket`: waits until `deadline` for it to begin, then at most
// options.frame_timeout for the rest (its MAC included, checked with `recv` when that
// is on). *peer_closed says whether a failure was a clean close between frames.
status read_frame_from(tcp_socket & socket, const link_options & options, frame_mac & recv, std::vector<uint8_t> & frame,
                       clock::time_point deadline, bool * peer_closed) {
    *peer_closed = false;
    // Between frames the lane may sit idle as long as the caller allows.
    uint8_t head[protocol::frame_header_bytes];
    status st = socket.read_exact(std::span<uint8_t>(head, 1), deadline);
    if (!st.is_ok()) {
        *peer_closed = st.code() == error_code::peer_closed;
        return st;
    }
    // A frame has begun: the rest must follow promptly.
    const auto frame_deadline = std::min(deadline, clock::now() + options.frame_timeout);
    auto truncated = [&](const status & why, size_t got, size_t want) {
        const std::string counts = std::to_string(got) + " of " + std::to_string(want) + " bytes";
        // A stall mid-frame is a timeout; a close mid-frame is a broken peer, not the
        // clean end of a lane (peer_closed() stays false).
        if (why.code() == error_code::timed_out) {
            return make_error(error_code::timed_out, "truncated frame: only " + counts + " arrived within " +
                                                         std::to_string(options.frame_timeout.count()) + " ms");
        }
        if (why.code() == error_code::peer_closed) {
            return make_error(error_code::unavailable, "truncated frame: the peer closed the connection after " + counts);
        }
        return make_error(why.code(), "truncated frame after " + counts + ": " + why.message());
    };
    size_t got = 0;
    st = socket.read_exact(std::span<uint8_t>(head + 1, 3), frame_deadline, &got);
    if (!st.is_ok()) return truncated(st, 1 + got, 4);
    SKIPPY_ASSIGN_OR_RETURN(uint32_t total, protocol::peek_frame_length(std::span<const uint8_t>(head, 4), options.limits));
    st = socket.read_exact(std::span<uint8_t>(head + 4, 2), frame_deadline, &got);
    if (!st.is_ok()) return truncated(st, 4 + got, total);
    SKIPPY_ASSIGN_OR_RETURN(protocol::message_kind kind, protocol::peek_frame_kind(head));
    if (total > protocol::max_frame_bytes_of_kind(kind, options.limits)) {
        return make_error(error_code::invalid_data, "frame of kind " + std::string(protocol::message_kind_name(kind)) + " claims " +
                                                        std::to_string(total) + " bytes; that kind has at most " +
                                                        std::to_string(protocol::max_frame_bytes_of_kind(kind, options.limits)));
    }
    // The length field is only a claim: memory grows with the bytes that actually
    // arrive (doubling from 64 KiB), so a header announcing 256 MiB costs 64 KiB until
    // the bytes come.
    constexpr size_t first_chunk_bytes = 64 << 10;
    frame.resize(std::min<size_t>(total, first_chunk_bytes));
    std::copy(head, head + sizeof(head), frame.begin());
    size_t have = sizeof(head);
    while (have < total) {
        if (have == frame.size()) frame.resize(std::min<size_t>(total, 2 * frame.size()));
        st = socket.read_exact(std::span<uint8_t>(frame).subspan(have), frame_deadline, &got);
        if (!st.is_ok()) return truncated(st, have + got, total);
        have = frame.size();
    }
    if (!recv.on()) return status::ok();
    protocol::auth_mac tag{};
    st = socket.read_exact(tag, frame_deadline, &got);
    if (!st.is_ok()) return truncated(st, total + got, total + tag.size());
    return recv.open(frame, tag);
}

// The listener's hello_reply, read by the dialer and turned into a status.
status read_hello_reply(tcp_socket & socket, const link_options & options, clock::time_point deadline, const std::string & peer_name) {
    std::vector<uint8_t> reply(protocol::hello_reply_fixed_bytes);
    SKIPPY_TRY(socket.read_exact(reply, deadline).with_context(peer_name + " handshake"));
    SKIPPY_ASSIGN_OR_RETURN(size_t total, protocol::peek_hello_reply_length(reply, options.limits));
    reply.resize(total);
    SKIPPY_TRY(socket.read_exact(std::span<uint8_t>(reply).subspan(protocol::hello_reply_fixed_bytes), deadline)
                   .with_context(peer_name + " handshake"));
    SKIPPY_ASSIGN_OR_RETURN(protocol::hello_reply answer, protocol::decode_hello_reply(reply, options.limits));
    return protocol::check_hello_reply(answer).with_context(peer_name + " refused the connection");
}

}  // namespace

status stage_link::read_frame(std::vector<uint8_t> & frame, clock::time_point deadline) {
    peer_closed_ = false;
    if (!socket_.valid()) return make_error(error_code::unavailable, peer_name_ + ": not connected");
    return annotate(read_frame_from(socket_, options_, macs_.recv, frame, deadline, &peer_closed_));
}

result<protocol::request> stage_link::read_request(clock::time_point deadline) {
    std::vector<uint8_t> frame;
    SKIPPY_TRY(read_frame(frame, deadline));
    auto r = protocol::decode_request(frame, options_.limits);
    if (!r.is_ok()) return annotate(r.error());
    return r;
}

result<protocol::reply> stage_link::read_reply(clock::time_point deadline) {
    std::vector<uint8_t> frame;
    SKIPPY_TRY(read_frame(frame, deadline));
    auto r = protocol::decode_reply(frame, options_.limits);
    if (!r.is_ok()) return annotate(r.error());
    return r;
}

result<protocol::step_frame> stage_link::read_step(clock::time_point deadline) {
    std::vector<uint8_t> frame;
    SKIPPY_TRY(read_frame(frame, deadline));
    auto s = protocol::decode_step(frame, options_.limits);
    if (!s.is_ok()) return annotate(s.error());
    return s;
}

result<std::optional<protocol::step_frame>> stage_link::read_step_or_heartbeat(clock::time_point deadline, uint64_t * heartbeat_id) {
    std::vector<uint8_t> frame;
    SKIPPY_TRY(read_frame(frame, deadline));
    auto kind = protocol::peek_frame_kind(frame);
    if (!kind.is_ok()) return annotate(kind.error());
    if (*kind == protocol::message_kind::heartbeat) {
        auto r = protocol::decode_request(frame, options_.limits);
        if (!r.is_ok()) return annotate(r.error());
        *heartbeat_id = r->request_id;
        return std::optional<protocol::step_frame>();
    }
    auto s = protocol::decode_step(frame, options_.limits);
    if (!s.is_ok()) return annotate(s.error());
    return std::optional<protocol::step_frame>(std::move(s).value());
}

result<protocol::request> read_first_request(tcp_socket & socket, const link_options & options, frame_mac & recv,
                                             clock::time_point deadline) {
    std::vector<uint8_t> frame;
    bool peer_closed = false;
    SKIPPY_TRY(read_frame_from(socket, options, recv, frame, deadline, &peer_closed));
    return protocol::decode_request(frame, options.limits);
}

result<stage_link> connect_link(const endpoint & ep, protocol::hello hello, const link_options & options,
                                const std::string & peer_name) {
    const bool keyed = !options.stage_key.empty();
    hello.auth = keyed ? protocol::link_auth::hmac_sha256 : protocol::link_auth::none;
    hello.nonce = {};
    if (keyed) {
        SKIPPY_ASSIGN_OR_RETURN(hello.nonce, random_nonce());
    }
    auto dialed = dial(ep, options.connect_timeout);
    if (!dialed.is_ok()) return dialed.error().with_context(peer_name);
    tcp_socket socket = std::move(dialed).value();
    if (options.tls) {
        SKIPPY_TRY(socket.start_tls(*options.tls, tls_role::client, clock::now() + options.handshake_timeout)
                       .with_context(peer_name + " handshake"));
    }
    const std::vector<uint8_t> hello_bytes = protocol::encode_hello(hello);
    SKIPPY_TRY(socket.write_all(hello_bytes).with_context(peer_name + " handshake"));
    const auto deadline = clock::now() + options.handshake_timeout;
    SKIPPY_TRY(read_hello_reply(socket, options, deadline, peer_name));
    if (!keyed) return stage_link(std::move(socket), options, peer_name);

    // The listener proves the key first, over our fresh nonce: a listener that cannot
    // never sees a proof of ours.
    std::vector<uint8_t> bytes(protocol::auth_challenge_bytes);
    SKIPPY_TRY(socket.read_exact(bytes, deadline).with_context(peer_name + " handshake"));
    SKIPPY_ASSIGN_OR_RETURN(protocol::auth_challenge challenge, protocol::decode_auth_challenge(bytes));
    if (!macs_equal(challenge.proof, handshake_proof(options.stage_key, link_role::listener, hello_bytes, challenge.nonce))) {
        return make_error(error_code::permission, peer_name + " did not prove the stage key (a different --stage-key-file?)");
    }
    const protocol::auth_mac proof = handshake_proof(options.stage_key, link_role::dialer, hello_bytes, challenge.nonce);
    SKIPPY_TRY(socket.write_all(proof).with_context(peer_name + " handshake"));
    SKIPPY_TRY(read_hello_reply(socket, options, deadline, peer_name));
    link_macs macs = derive_link_macs(options.stage_key, link_role::dialer, hello_bytes, challenge.nonce);
    if (!macs.send.on() || !macs.recv.on()) return make_error(error_code::internal, "cannot set up frame MACs");
    return stage_link(std::move(socket), options, peer_name, std::move(macs));
}

result<accepted_link> answer_hello(tcp_socket & socket, const link_options & options,
                                   const std::function<status(const protocol::hello &)> & accept_hello) {
    const auto deadline = clock::now() + options.handshake_timeout;
    auto refuse = [&](protocol::hello_status why, const std::string & reason) {
        protocol::hello_reply r;
        r.status = why;
        r.reason = reason.substr(0, options.limits.max_error_message_bytes);
        (void)socket.write_all(protocol::encode_hello_reply(r));
    };
    if (options.tls) SKIPPY_TRY(socket.start_tls(*options.tls, tls_role::server, deadline));
    std::vector<uint8_t> buf(protocol::hello_prefix_bytes);
    SKIPPY_TRY(socket.read_exact(buf, deadline));
    auto version = protocol::peek_hello_version(buf);
    if (!version.is_ok()) return version.error();  // not our protocol at all: just close
    if (*version != protocol::protocol_version) {
        (void)socket.write_all(protocol::encode_hello_reply(protocol::refuse_version(*version)));
        return make_error(error_code::unsupported, protocol::refuse_version(*version).reason);
    }
    buf.resize(protocol::hello_bytes);
    SKIPPY_TRY(socket.read_exact(std::span<uint8_t>(buf).subspan(protocol::hello_prefix_bytes), deadline));
    auto hello = protocol::decode_hello(buf);
    if (!hello.is_ok()) {
        refuse(protocol::hello_status::bad_request, hello.error().message());
        return hello.error();
    }
    const bool keyed = !options.stage_key.empty();
    protocol::hello_reply decision =
        protocol::decide_hello(*hello, keyed ? protocol::link_auth::hmac_sha256 : protocol::link_auth::none);
    if (decision.status != protocol::hello_status::ok) {
        (void)socket.write_all(protocol::encode_hello_reply(decision));
        return make_error(error_code::permission, decision.reason);
    }
    accepted_link out{*hello, {}};
    if (keyed) {
        // Go on: our proof over the dialer's nonce and ours, then the dialer's over both.
        SKIPPY_TRY(socket.write_all(protocol::encode_hello_reply(protocol::hello_reply{})));
        protocol::auth_challenge challenge;
        SKIPPY_ASSIGN_OR_RETURN(challenge.nonce, random_nonce());
        challenge.proof = handshake_proof(options.stage_key, link_role::listener, buf, challenge.nonce);
        SKIPPY_TRY(socket.write_all(protocol::encode_auth_challenge(challenge)));
        protocol::auth_mac proof{};
        SKIPPY_TRY(socket.read_exact(proof, deadline));
        if (!macs_equal(proof, handshake_proof(options.stage_key, link_role::dialer, buf, challenge.nonce))) {
            refuse(protocol::hello_status::unauthorized, "the peer did not prove the stage key");
            return make_error(error_code::permission, "the peer did not prove the stage key");
        }
        out.macs = derive_link_macs(options.stage_key, link_role::listener, buf, challenge.nonce);
        if (!out.macs.send.on() || !out.macs.recv.on()) {
            refuse(protocol::hello_status::busy, "cannot set up frame MACs");
            return make_error(error_code::internal, "cannot set up frame MACs");
        }
    }
    status accepted = accept_hello(*hello);
    if (!accepted.is_ok()) {
        refuse(accepted.code() == error_code::unavailable ? protocol::hello_status::busy : protocol::hello_status::bad_request,
               accepted.message());
        return accepted;
    }
    SKIPPY_TRY(socket.write_all(protocol::encode_hello_reply(protocol::hello_reply{})));
    return out;
}

tcp_socket handshake_pool::pending::take() {
    std::lock_guard<std::mutex> lock(pool_->mutex_);
    return std::move(socket_);
}

bool handshake_pool::start(tcp_socket socket, std::function<void(pending &)> handshake) {
    std::lock_guard<std::mutex> lock(mutex_);
    reap_locked();
    if (stopped_) return false;  // `socket` closes here
    const std::string address = socket.peer_host();
    std::map<std::string, int32_t> per_address;
    int32_t n_live = 0;
    for (const auto & p : running_) {
        if (p->done_ || p->evicted_) continue;
        ++per_address[p->address_];
        ++n_live;
    }
    if (per_address[address] >= max_per_address_) {
        evict_oldest_locked(address);
    } else if (n_live >= max_pending_) {
        // The address with the most pending handshakes pays: a flood pushes out its own.
        auto most = std::max_element(per_address.begin(), per_address.end(),
                                     [](const auto & a, const auto & b) { return a.second < b.second; });
        evict_oldest_locked(most->first);
    }
    auto p = std::make_unique<pending>();
    p->pool_ = this;
    p->socket_ = std::move(socket);
    p->address_ = address;
    pending * raw = p.get();
    running_.push_back(std::move(p));
    raw->thread_ = std::thread([this, raw, handshake = std::move(handshake)] {
        handshake(*raw);
        std::lock_guard<std::mutex> done_lock(mutex_);
        raw->socket_.close();  // unless taken
        raw->done_ = true;
    });
    return true;
}

void handshake_pool::evict_oldest_locked(const std::string & address) {
    for (auto & p : running_) {  // oldest first
        if (p->done_ || p->evicted_ || p->address_ != address) continue;
        p->evicted_ = true;
        p->socket_.shutdown();  // its reads fail at once; the thread ends and is reaped
        ++n_evicted_;
        return;
    }
}

int64_t handshake_pool::n_evicted() {
    std::lock_guard<std::mutex> lock(mutex_);
    return n_evicted_;
}

void handshake_pool::reap_locked() {
    for (auto it = running_.begin(); it != running_.end();) {
        if ((*it)->done_) {
            (*it)->thread_.join();  // it only has to return
            it = running_.erase(it);
        } else {
            ++it;
        }
    }
}

int32_t handshake_pool::n_pending() {
    std::lock_guard<std::mutex> lock(mutex_);
    reap_locked();
    return static_cast<int32_t>(std::count_if(running_.begin(), running_.end(), [](const auto & p) { return !p->evicted_; }));
}

void handshake_pool::stop() {
    std::list<std::unique_ptr<pending>> all;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stopped_ = true;
        for (auto & p : running_) {
            if (!p->done_) p->socket_.shutdown();
        }
        all.swap(running_);
    }
    for (auto & p : all) {
        if (p->thread_.joinable()) p->thread_.join();
    }
}

}  // namespace skippy::transport
