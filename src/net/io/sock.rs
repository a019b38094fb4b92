//! Socket calls both backends make the same way.

/// One `recv(MSG_PEEK | MSG_DONTWAIT)`: true if the socket holds unread bytes (false at EOF,
/// on an error, or when it holds none).
pub(super) fn peek(fd: &impl std::os::fd::AsFd) -> bool {
    let mut byte = [std::mem::MaybeUninit::<u8>::uninit(); 1];
    let flags = libc::MSG_PEEK | libc::MSG_DONTWAIT;
    matches!(socket2::SockRef::from(fd).recv_with_flags(&mut byte, flags), Ok(n) if n > 0)
}
