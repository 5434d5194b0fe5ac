import ParleyModel
import Synchronization

/// The bytes of each user's uploads under way on one gateway, counted against the user's quota
/// with what is kept already.
final class UploadsUnderWay: Sendable {
    private let bytes = Mutex<[UserID: Int64]>([:])

    /// Counts `length` more for `user` if what is under way stays within `room`; false, counting
    /// nothing, when it would not.
    func reserve(_ length: Int64, for user: UserID, within room: Int64) -> Bool {
        bytes.withLock { bytes in
            let under = bytes[user, default: 0]
            guard under + length <= room else { return false }
            bytes[user] = under + length
            return true
        }
    }

    /// The upload that reserved `length` ended (kept, refused or cut off).
    func release(_ length: Int64, for user: UserID) {
        bytes.withLock { bytes in
            let left = bytes[user, default: 0] - length
            bytes[user] = left > 0 ? left : nil
        }
    }

}
