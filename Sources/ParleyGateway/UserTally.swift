import ParleyModel
import Synchronization

/// An amount per user that only what is under way adds to — the bytes of uploads coming, the
/// downloads being written — held against a limit: each reservation is released when what made
/// it ends.
final class UserTally: Sendable {
    private let amounts = Mutex<[UserID: Int64]>([:])

    /// Counts `amount` more for `user` if the user's total stays within `limit`; false, counting
    /// nothing, when it would not.
    func reserve(_ amount: Int64, for user: UserID, within limit: Int64) -> Bool {
        amounts.withLock { amounts in
            let held = amounts[user, default: 0]
            guard held + amount <= limit else { return false }
            amounts[user] = held + amount
            return true
        }
    }

    /// What reserved `amount` ended.
    func release(_ amount: Int64, for user: UserID) {
        amounts.withLock { amounts in
            let left = amounts[user, default: 0] - amount
            amounts[user] = left > 0 ? left : nil
        }
    }

    /// What `user` holds now.
    func held(by user: UserID) -> Int64 {
        amounts.withLock { $0[user, default: 0] }
    }

    /// One reservation, released when the last reference to it goes: a response body that is
    /// never written still gives it back.
    final class Reservation: Sendable {
        private let tally: UserTally
        private let amount: Int64
        private let user: UserID

        init(_ tally: UserTally, _ amount: Int64, for user: UserID) {
            self.tally = tally
            self.amount = amount
            self.user = user
        }

        deinit {
            tally.release(amount, for: user)
        }
    }
}
