// swift-tools-version:6.0
import PackageDescription

// Dependencies point inward: ParleyCluster knows nothing of NIO or any database;
// ParleyTransport implements ClusterSystem's transport on SwiftNIO + TLS; executables assemble.
let upcoming: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
]

let package = Package(
    name: "Parley",
    // ParleyClient is for iOS and macOS apps: it uses only what these platforms have (Foundation,
    // SwiftNIO, swift-nio-ssl, AsyncHTTPClient and the standard library's Synchronization, which
    // sets the floor). The server runs on Linux.
    platforms: [.macOS(.v15), .iOS(.v18)],
    products: [
        .executable(name: "parley-node", targets: ["parley-node"]),
        .executable(name: "parley", targets: ["parley"]),
        .executable(name: "parley-load", targets: ["parley-load"]),
        .library(name: "ParleyClient", targets: ["ParleyClient"]),
        .library(name: "ParleyCluster", targets: ["ParleyCluster"]),
        .library(name: "ParleyTransport", targets: ["ParleyTransport"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.3"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
        .package(url: "https://github.com/apple/swift-nio-http2.git", from: "1.46.0"),
        .package(url: "https://github.com/apple/swift-nio-extras.git", from: "1.35.2"),
        .package(url: "https://github.com/apple/swift-collections.git", from: "1.6.0"),
        .package(url: "https://github.com/apple/swift-certificates.git", from: "1.21.1"),
        .package(url: "https://github.com/apple/swift-crypto.git", from: "3.12.3"),
        .package(url: "https://github.com/apple/swift-asn1.git", from: "1.7.4"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/groue/GRDB.swift.git", from: "7.10.0"),
        .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.33.2"),
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1"),
        .package(url: "https://github.com/hummingbird-project/hummingbird-auth.git", from: "2.5.0"),
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        .package(url: "https://github.com/HdrHistogram/hdrhistogram-swift.git", from: "0.2.0"),
    ],
    targets: [
        .target(name: "ParleyModel", swiftSettings: upcoming),
        // Reads the metadata of uploaded files (hostile bytes) to remove their location.
        .target(name: "ParleyMetadata", swiftSettings: upcoming),
        .target(name: "ParleyStore", dependencies: ["ParleyModel"], swiftSettings: upcoming),
        .target(
            name: "ParleyStoreSQLite",
            dependencies: [
                "ParleyModel",
                "ParleyStore",
                "CSQLiteSettings",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "GRDBSQLite", package: "GRDB.swift"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: upcoming
        ),
        .target(
            name: "ParleyStorePostgres",
            dependencies: [
                "ParleyMedia",
                .product(name: "Crypto", package: "swift-crypto"),
                "ParleyModel",
                "ParleyStore",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: upcoming
        ),
        .target(
            name: "ParleyChat",
            dependencies: [
                "ParleyModel",
                "ParleyStore",
                "ParleyCluster",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
            ],
            swiftSettings: upcoming
        ),
        // Push providers (APNs, FCM) over AsyncHTTPClient's HTTP/2; the workers' users' actors
        // send through them.
        .target(
            name: "ParleyMedia",
            dependencies: [
                "ParleyModel",
                "ParleyMetadata",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            swiftSettings: upcoming
        ),
        .target(
            name: "ParleyPush",
            dependencies: [
                "ParleyChat",
                "ParleyCluster",
                "ParleyHTTP2Client",
                "ParleyModel",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: upcoming
        ),
        .target(
            name: "ParleyGateway",
            dependencies: [
                "ParleyMedia",
                "ParleyMetadata",
                "ParleyImaging",
                "ParleyWebClient",
                "ParleyModel",
                "ParleyChat",
                "ParleyCluster",
                "ParleyTransport",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "HummingbirdBcrypt", package: "hummingbird-auth"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
            ],
            swiftSettings: upcoming
        ),
        .target(
            name: "ParleyClient",
            dependencies: [
                "ParleyModel",
                "ParleyHTTP2Client",
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOFoundationCompat", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: upcoming
        ),
        .target(
            name: "ParleyCluster",
            dependencies: [
                "ParleyModel",
                .product(name: "HeapModule", package: "swift-collections"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
            ],
            swiftSettings: upcoming
        ),
        .target(
            name: "ParleyWire",
            dependencies: ["ParleyCluster", .product(name: "NIOCore", package: "swift-nio")],
            swiftSettings: upcoming
        ),
        .target(
            name: "ParleyTransport",
            dependencies: [
                "ParleyCluster",
                "ParleyModel",
                "ParleyWire",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
            ],
            swiftSettings: upcoming
        ),
        .target(
            name: "ParleyFuzzTargets",
            dependencies: [
                "ParleyModel", "ParleyMetadata", "ParleyCluster", "ParleyChat", "ParleyWire", .product(name: "NIOCore", package: "swift-nio"),
            ],
            swiftSettings: upcoming
        ),
        .target(name: "CLibFuzzer"),
        // libvips for thumbnails, loaded when first used (Debian: libvips42).
        .target(name: "CVips"),
        // SQLite's process-wide settings (sqlite3_config is variadic).
        .target(name: "CSQLiteSettings", linkerSettings: [.linkedLibrary("sqlite3")]),
        .target(name: "ParleyImaging", dependencies: ["CVips"], swiftSettings: upcoming),
        .target(
            name: "ParleyWebClient", dependencies: ["ParleyMedia", .product(name: "Crypto", package: "swift-crypto")],
            resources: [.embedInCode("Web")], swiftSettings: upcoming),
        .executableTarget(
            name: "parley-fuzz",
            dependencies: ["ParleyFuzzTargets", "CLibFuzzer"],
            swiftSettings: upcoming
        ),
        .target(
            name: "ParleyTestKit",
            dependencies: [
                "ParleyCluster", "ParleyMedia", "ParleyModel", "ParleyStore", "ParleyTransport",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
            ],
            swiftSettings: upcoming
        ),
        // Seeded simulations on a manual timeline — of the pure state machines, and of whole
        // clusters of real actors over a simulated network and clock: no NIO, so that the
        // simulator builds in release quickly enough for CI to run a thousand seeds.
        .target(
            name: "ParleySimulation",
            dependencies: ["ParleyChat", "ParleyCluster", "ParleyGateway", "ParleyModel", "ParleyStore", .product(name: "NIOCore", package: "swift-nio")],
            swiftSettings: upcoming
        ),
        .executableTarget(
            name: "parley-simulate",
            dependencies: ["ParleyChat", "ParleySimulation", .product(name: "ArgumentParser", package: "swift-argument-parser")],
            swiftSettings: upcoming
        ),
        .executableTarget(
            name: "parley-node",
            dependencies: [
                "ParleyMedia",
                "ParleyChat",
                "ParleyPush",
                "ParleyModel",
                "ParleyGateway",
                "ParleyStore",
                "ParleyStoreSQLite",
                "ParleyStorePostgres",
                "ParleyCluster",
                "ParleyTransport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ],
            swiftSettings: upcoming
        ),
        .target(
            name: "ParleyLoad",
            dependencies: [
                "ParleyModel", .product(name: "Histogram", package: "hdrhistogram-swift"), .product(name: "NIOCore", package: "swift-nio"),
            ],
            swiftSettings: upcoming
        ),
        // HTTP/2 requests without a channel per stream: the load generator's connections and the
        // APNs provider's.
        .target(
            name: "ParleyHTTP2Client",
            dependencies: [
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "DequeModule", package: "swift-collections"),
            ],
            swiftSettings: upcoming
        ),
        .executableTarget(
            name: "parley-load",
            dependencies: [
                "ParleyLoad",
                "ParleyImaging",
                "ParleyHTTP2Client",
                "ParleyClient",
                "ParleyModel",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Histogram", package: "hdrhistogram-swift"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "DequeModule", package: "swift-collections"),
            ],
            swiftSettings: upcoming
        ),
        .executableTarget(
            name: "parley",
            dependencies: [
                "ParleyClient",
                "ParleyModel",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            swiftSettings: upcoming
        ),
        .executableTarget(
            name: "parley-bench",
            dependencies: [
                "ParleyChat",
                "ParleyCluster",
                "ParleyGateway",
                "ParleyLoad",
                "ParleyModel",
                "ParleyStore",
                "ParleyStoreSQLite",
                "ParleyStorePostgres",
                "ParleyTransport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
            ],
            path: "Benchmarks/parley-bench",
            swiftSettings: upcoming
        ),
        .testTarget(
            name: "ParleyStoreTests",
            dependencies: [
                "ParleyModel", "ParleyStore", "ParleyStoreSQLite", "ParleyStorePostgres", "ParleyTestKit", "ParleyMedia",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "GRDBSQLite", package: "GRDB.swift"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
            ],
            swiftSettings: upcoming
        ),
        .testTarget(
            name: "ParleyChatTests",
            dependencies: ["ParleyModel", "ParleyStore", "ParleyStoreSQLite", "ParleyChat", "ParleyCluster", "ParleyTestKit", "ParleySimulation"],
            swiftSettings: upcoming
        ),
        .testTarget(
            name: "ParleyGatewayTests",
            dependencies: [
                "ParleyGateway", "ParleyImaging", "ParleyChat", "ParleyModel", "ParleyTestKit", "ParleySimulation",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "MetricsTestKit", package: "swift-metrics"),
            ],
            swiftSettings: upcoming
        ),
        .testTarget(
            name: "ParleyMediaTests",
            dependencies: ["ParleyMedia", "ParleyModel", "ParleyTestKit", .product(name: "NIOCore", package: "swift-nio")],
            swiftSettings: upcoming
        ),
        .testTarget(
            name: "ParleyPushTests",
            dependencies: [
                "ParleyPush", "ParleyChat", "ParleyModel",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ],
            swiftSettings: upcoming
        ),
        .testTarget(
            name: "ParleyMetadataTests",
            dependencies: ["ParleyMetadata", "ParleyModel", "ParleyFuzzTargets"],
            swiftSettings: upcoming
        ),
        .testTarget(
            name: "ParleyModelTests",
            dependencies: ["ParleyModel", "ParleyTestKit"],
            swiftSettings: upcoming
        ),
        .testTarget(
            name: "ParleyClientTests",
            dependencies: ["ParleyClient", "ParleyModel", .product(name: "GRDB", package: "GRDB.swift")],
            swiftSettings: upcoming
        ),
        .testTarget(
            name: "ParleyLoadTests",
            dependencies: [
                "ParleyLoad", "ParleyModel", .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOPosix", package: "swift-nio"),
            ],
            swiftSettings: upcoming
        ),
        .testTarget(
            name: "ParleyHTTP2ClientTests",
            dependencies: [
                "ParleyHTTP2Client", .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"), .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
            ],
            swiftSettings: upcoming
        ),
        .testTarget(
            name: "ParleyClusterTests",
            dependencies: ["ParleyCluster", "ParleyTestKit", "ParleySimulation"],
            swiftSettings: upcoming
        ),
        .testTarget(
            name: "ParleyFuzzTests",
            dependencies: ["ParleyFuzzTargets", "ParleyModel"],
            swiftSettings: upcoming
        ),
        .testTarget(
            name: "ParleyTransportTests",
            dependencies: [
                "ParleyCluster",
                "ParleyModel",
                "ParleyTransport",
                "ParleyWire",
                "ParleyTestKit", "ParleySimulation",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: upcoming
        ),
    ]
)
