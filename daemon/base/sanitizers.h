// Whether this build runs under AddressSanitizer: storage the daemon keeps for reuse (coroutine
// frames, scratch blocks) then comes from the heap every time, so ASan still sees each use after
// free or overflow.
#ifndef SYNCD_DAEMON_BASE_SANITIZERS_H_
#define SYNCD_DAEMON_BASE_SANITIZERS_H_

namespace syncd {

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kAddressSanitizer = true;
#else
inline constexpr bool kAddressSanitizer = false;
#endif
#else
inline constexpr bool kAddressSanitizer = false;
#endif

}  // namespace syncd

#endif  // SYNCD_DAEMON_BASE_SANITIZERS_H_
