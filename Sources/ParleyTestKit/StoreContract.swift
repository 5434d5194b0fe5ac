/// One case of a store's contract (``ChatStoreContract``, ``BlobStoreContract``): test targets run
/// each case against each store (`@Test(arguments: ….cases)`); a broken rule throws
/// ``ContractViolation``.
public struct ContractCase<Store: Sendable>: Sendable, CustomStringConvertible {
    public let name: String
    public let run: @Sendable (Store) async throws -> Void
    public var description: String { name }

    public init(name: String, run: @escaping @Sendable (Store) async throws -> Void) {
        self.name = name
        self.run = run
    }
}

public struct ContractViolation: Error, CustomStringConvertible {
    public var description: String
}

/// Throws ``ContractViolation`` naming the contract's file and line when `condition` is false.
func contractCheck(_ condition: Bool, _ message: () -> String, file: String, line: Int) throws {
    if !condition { throw ContractViolation(description: "\(file):\(line): \(message())") }
}
