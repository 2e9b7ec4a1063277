// A Worker for test/batches-turns.test.ts: drives this thread's side of the
// batch Workers' turns at the CPU (src/batches/worker/turns.ts) and its
// garbage budget (src/batches/worker/garbage.ts) by message, and answers
// each step.
import { collections, worked } from "../../src/batches/worker/garbage";
import { giveTurn, holdsTurn, initTurns, takeTurn } from "../../src/batches/worker/turns";

declare const self: Worker;

self.onmessage = async (e: MessageEvent) => {
  const m = e.data;
  switch (m.cmd) {
    case "init":
      initTurns(m.turns, m.turn);
      break;
    case "take": {
      const wait = takeTurn();
      self.postMessage({ cmd: "taking", waits: wait !== null });
      if (wait) await wait;
      break;
    }
    case "work":
      worked(m.chars);
      break;
    case "give":
      giveTurn();
      break;
  }
  self.postMessage({ cmd: `${m.cmd}-done`, holds: holdsTurn(), collections: collections().collections });
};
