// Ctrl-C in the client commands. Bun installs the process's SIGINT handler
// only on a later turn of the event loop after `process.on("SIGINT")`: a
// Ctrl-C that lands in between kills the process with no word said. So one
// listener is put in place when a client command starts (listenForInterrupt),
// long before anything is worth saying, and each step that has something to
// say on Ctrl-C (the batch keeps running, the download stopped) sets what
// it says with onInterrupt, synchronously, with no window.

let current: (() => void) | null = null;
let listening = false;

function interrupted(): void {
  const say = current;
  if (say) say(); // says what to do next and exits 130 itself
  process.exit(130);
}

/** At the start of a client command: from now on Ctrl-C runs the handler set by onInterrupt, or just exits 130. */
export function listenForInterrupt(): void {
  if (listening) return;
  listening = true;
  process.on("SIGINT", interrupted);
}

/** What Ctrl-C does from now on (null: exit 130, saying nothing); returns the function that puts the previous one back. */
export function onInterrupt(handler: (() => void) | null): () => void {
  listenForInterrupt();
  const previous = current;
  current = handler;
  return () => {
    current = previous;
  };
}
