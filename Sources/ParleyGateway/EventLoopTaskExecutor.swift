import NIOCore

/// Runs the jobs of the tasks that prefer it on one event loop. A request on an HTTP/2 connection
/// is answered by a task that prefers the connection's loop: the route runs where the request
/// was read and where its reply is written, and a cluster call's reply read on the same loop
/// resumes it without waking another thread (on this machine a thread handoff costs more than
/// most of the work handed over). Actor-isolated work still runs on its actor's executor.
///
/// Jobs must not block: what does (bcrypt) runs on NIO's thread pool, as it did before.
final class EventLoopTaskExecutor: TaskExecutor {
    let loop: any EventLoop

    init(loop: any EventLoop) {
        self.loop = loop
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        loop.execute { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }
}
