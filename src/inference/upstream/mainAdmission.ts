// The admission port (./pass.ts) as the main thread implements it, with
// its own state: the key's rate limits and the model's slot
// (../admission/admit.ts), the upstream's health and the replica
// (./call.ts UpstreamLeg), tokens against tpm, a revocation that ends a
// stream. The main thread's own pass-through uses it directly; for a
// request a front thread answers, the main thread keeps one per request and
// runs the same steps when the thread's messages say so (src/http/front/desk.ts).
// The request line and the metrics of an answer are written where every
// answer's are (src/metrics/http.ts), not here.
import { streamHold, type StreamHold } from "../../auth/revocations";
import type { Principal } from "../../auth/verify";
import type { AppContext } from "../../context";
import type { EndpointPath } from "../../endpoints/kind";
import { admit, type Admitted as SlotAdmitted } from "../admission/admit";
import type { Release } from "../admission/scheduler";
import { ANSWERED, UNMEASURED, type SlotOutcome } from "../admission/slotCells";
import type { ModelEntry } from "../registry";
import { UpstreamLeg, type Prompt } from "./call";
import { classify, type CallFailure, type Fate } from "./fate";
import type { UpstreamNamed } from "./interactive";
import type { AdmissionPort, Admitted } from "./pass";
import type { UpstreamTarget } from "./transport";

export interface MainAdmissionRequest {
  model: ModelEntry;
  path: EndpointPath;
  /** What chooses among several replicas: the body (its prompt's prefix), or the prefix's key a front thread hashed. */
  prompt: Prompt;
  /** The prompt's tokens as offpeak counts them (rate limits are checked before the call). */
  promptTokens: number;
  requestId: string;
  /** The client's signal, aborted when it goes away; read only when it waits for a slot. */
  clientSignal: () => AbortSignal;
}

/** Once admitted, it is also its own Admitted (one object a request fewer on the main thread's hot path). */
export class MainAdmission implements AdmissionPort, Admitted {
  private release: Release | null = null;
  private leg: UpstreamLeg | null = null;
  target!: UpstreamTarget;
  upstream!: UpstreamNamed;
  upstreamModel!: string;
  headers!: Record<string, string>;
  metersTokens!: boolean;
  readonly requestId: string;

  constructor(
    private readonly ctx: AppContext,
    readonly principal: Principal,
    private readonly req: MainAdmissionRequest,
  ) {
    this.requestId = req.requestId;
  }

  /** As ../admission/admit.ts admits (no promise when a slot is free), then the upstream's leg: down, counted, a replica. */
  admit(): Admitted | Promise<Admitted> {
    const { ctx, principal, req } = this;
    const slot = admit(ctx, principal, req.model, req.promptTokens, req.clientSignal);
    return slot instanceof Promise ? slot.then((s) => this.onLeg(s)) : this.onLeg(slot);
  }

  private onLeg(slot: SlotAdmitted): Admitted {
    this.release = slot.release;
    let leg: UpstreamLeg;
    try {
      leg = new UpstreamLeg(this.req.model, this.req.path, this.req.prompt);
    } catch (e) {
      this.settle(UNMEASURED, 0);
      throw e;
    }
    this.leg = leg;
    this.target = leg.target;
    this.upstream = leg.upstream;
    this.upstreamModel = leg.upstreamModel;
    this.headers = slot.headers;
    this.metersTokens = slot.metersTokens;
    return this;
  }

  /** Whether the upstream spreads its requests over several replicas (known once admitted). */
  get spread(): boolean {
    return this.leg?.spread ?? false;
  }

  answered(status: number, fate: Fate): void {
    this.leg?.answered(status, fate);
  }

  failed(failure: CallFailure): never {
    return this.leg!.failed(failure);
  }

  /** A failed call as a front thread saw it (the error object does not cross threads): counted, told; the error to answer. The slot goes. */
  failedWith(fate: Fate, timedOut: boolean): unknown {
    const error = this.leg!.failedWith(fate, timedOut);
    this.settle(UNMEASURED, 0);
    return error;
  }

  cancelled(): void {
    this.leg?.cancelled();
  }

  elsewhere(failure: CallFailure): UpstreamTarget | null {
    return this.elsewhereAfter(classify(failure));
  }

  /** The call never reached its replica (`fate`, as a front thread saw it too): the next replica to try, or null (./call.ts UpstreamLeg.elsewhereAfter). */
  elsewhereAfter(fate: Fate): UpstreamTarget | null {
    const next = this.leg?.elsewhereAfter(fate) ?? null;
    if (next) this.target = next;
    return next;
  }

  settle(outcome: SlotOutcome, tokens: number): void {
    if (tokens) this.ctx.rateLimiter.charge(this.principal.keyId, tokens);
    const release = this.release;
    this.release = null;
    release?.(outcome);
    // A request that ended without a call (a front thread's client left first) leaves its replica too.
    this.leg?.cancelled();
  }

  streamEnded(tokens: number): void {
    this.settle(ANSWERED, tokens);
  }

  hold(): StreamHold {
    return streamHold(this.ctx.db, this.principal.keyId);
  }
}
