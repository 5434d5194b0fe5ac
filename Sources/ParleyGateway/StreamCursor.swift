import Foundation
import Logging
import ParleyChat
import ParleyModel

extension StreamCursor {
    /// The cursor after an event: never moves back.
    public func advanced(by event: ChatEvent) -> StreamCursor {
        guard let at = event.durableAt else { return self }
        return StreamCursor(millis: max(millis, at.millisecondsSince1970))
    }
}
