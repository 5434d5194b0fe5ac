import NIOCore

/// Runs the jobs of the tasks that prefer it on one event loop: work started by what a connection
/// read runs where it was read and where its answer is written, and a reply read on the same loop
/// resumes it without waking another thread (on this machine a thread handoff costs more than
/// most of the work handed over). A default actor called from such a task runs there too; an
/// actor with an executor of its own still hops to it.
///
/// Used for the gateway's HTTP/2 requests and the cluster calls a node receives. Jobs must not
/// block: what does (bcrypt, SQLite) runs on a thread pool or a queue of its own.
public final class EventLoopTaskExecutor: TaskExecutor {
    public let loop: any EventLoop

    public init(loop: any EventLoop) {
        self.loop = loop
    }

    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        loop.execute { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }
}
