"""Draw samples from an OpenAI-compatible server into a resumable, append-only JSONL.

The first line of the file is a metadata header: the server's ``/v1/models`` answer, the
request parameters, the prompts and what the server turned out to offer (``n``,
``logprobs``, token ids). Every further line is one sample, keyed by ``(prompt, sample)``
index; a rerun with the same parameters reads the file, drops a torn last line, and draws
only the missing indices, so an interruption loses at most the requests in flight and
never duplicates a sample.

One async HTTP client (``httpx2``, connection pool sized to the concurrency) sends the
requests under a semaphore and an optional rate limit, and retries 429 and 5xx answers
and dropped connections with exponential backoff (honouring ``Retry-After``). Samples
per request: ``n`` where the server honours it, else one.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import math
import os
import ssl
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence, TextIO

import specgauge
from specgauge.errors import ConfigError, InputFileError, SpecgaugeError
from specgauge.stattests.server.progress import Progress

FORMAT = "specgauge-probe/1"
POOL_SIZE = 4  # connections per HTTP client; more requests in flight use more clients
BUILTIN_PROMPTS = (
    # next few tokens close to determined for any instruction-tuned or base model
    "Monday, Tuesday, Wednesday, Thursday,",
    "January, February, March, April,",
    "1, 2, 3, 4, 5, 6, 7,",
    "A, B, C, D, E, F, G,",
    "The capital of France is",
    "To be, or not to be, that is the",
    "Twinkle, twinkle, little star, how I wonder what you",
    "The opposite of hot is",
)


class ServerError(SpecgaugeError):
    """The server could not be reached, did not speak the OpenAI API, or refused the requests."""


class TemperatureIgnoredError(ServerError):
    """Every sample of every prompt was identical although the temperature asks for sampling."""


class DeadlineError(ServerError):
    """The probe's overall deadline passed; what landed is in the file and a rerun resumes it."""


@dataclass(frozen=True)
class ProbeConfig:
    """What to ask the server for; everything here is recorded in the JSONL header."""

    url: str
    model: str | None = None            # default: the first model /v1/models lists
    endpoint: str = "completions"       # "completions" or "chat"
    temperature: float = 1.0
    top_p: float | None = None
    top_k: int | None = None            # sent only when set (some servers refuse the field)
    min_p: float | None = None          # sent only when set (llama.cpp, vLLM, SGLang read it)
    stop: tuple[str, ...] | None = None  # stop strings, sent only when set
    max_tokens: int = 3                 # L: the length of every sampled sequence
    samples_per_prompt: int = 100
    top_logprobs: int = 0               # ask for this many top logprobs per position (0: none)
    n: int = 16                         # samples per request where the server honours `n`
    extra_body: Mapping[str, Any] = field(default_factory=dict)  # engine fields, e.g. generation_config

    def __post_init__(self) -> None:
        if self.endpoint not in ("completions", "chat"):
            raise ConfigError(f"endpoint must be 'completions' or 'chat', got {self.endpoint!r}")
        if self.max_tokens < 1 or self.samples_per_prompt < 1 or self.n < 1:
            raise ConfigError("max_tokens, samples_per_prompt and n must be at least 1")
        if not (self.temperature >= 0 and math.isfinite(self.temperature)):
            raise ConfigError(f"temperature must be a finite number >= 0, got {self.temperature!r}")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise ConfigError(f"top_p must lie in (0, 1], got {self.top_p!r}")
        if self.min_p is not None and not 0 <= self.min_p <= 1:
            raise ConfigError(f"min_p must lie in [0, 1], got {self.min_p!r}")
        if self.top_k is not None and self.top_k < 0:
            raise ConfigError(f"top_k must be >= 0 (0: off on llama.cpp), got {self.top_k!r}")
        if self.top_logprobs < 0:
            raise ConfigError(f"top_logprobs must be >= 0, got {self.top_logprobs!r}")

    def params(self) -> dict[str, Any]:
        """The fields that decide the law being sampled (a resumed file must match them)."""
        out = asdict(self)
        out.pop("url")
        out["extra_body"] = dict(self.extra_body)
        out["stop"] = list(self.stop) if self.stop is not None else None
        return out


@dataclass(frozen=True)
class ClientConfig:
    """How to talk to the server; not part of the law, so free to change on resume."""

    concurrency: int = 4
    max_rps: float | None = None        # requests started per second, at most
    retries: int = 5
    backoff_s: float = 0.25             # first retry delay; doubles, capped at 8 s
    timeout_s: float = 120.0            # a whole request, body included (an endless body counts)
    api_key: str | None = None
    max_retry_after_s: float = 60.0     # a server's Retry-After is honoured up to this
    deadline_s: float | None = None     # the whole probe; the file keeps what landed, a rerun resumes

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ConfigError(f"concurrency must be at least 1 request in flight, got {self.concurrency!r}")
        if self.max_rps is not None and not (self.max_rps > 0 and math.isfinite(self.max_rps)):
            raise ConfigError(f"max_rps must be a positive number, got {self.max_rps!r}")
        if self.retries < 0:
            raise ConfigError(f"retries must be >= 0, got {self.retries!r}")
        if not (self.timeout_s > 0 and math.isfinite(self.timeout_s)):
            raise ConfigError(f"timeout must be a positive number of seconds (a request cannot finish in "
                              f"{self.timeout_s!r} s)")
        if not (self.max_retry_after_s >= 0 and math.isfinite(self.max_retry_after_s)):
            raise ConfigError(f"max_retry_after_s must be a number of seconds >= 0, got {self.max_retry_after_s!r}")
        if self.deadline_s is not None and not (self.deadline_s > 0 and math.isfinite(self.deadline_s)):
            raise ConfigError(f"deadline must be a positive number of seconds, got {self.deadline_s!r}")


@dataclass(frozen=True)
class ProbeRun:
    """The journal's content: header, then one record per (prompt, sample)."""

    header: dict[str, Any]
    records: list[dict[str, Any]]
    path: Path | None = None


# ---------------------------------------------------------------- prompts


def load_prompts(path: Path | str | None) -> list[str]:
    """Prompts from a JSONL file (``{"prompt": ...}`` or a bare JSON string per line), else the built-in set."""
    if path is None:
        return list(BUILTIN_PROMPTS)
    from specgauge import inputs

    prompts: list[str] = []
    lines = inputs.read_input_text(path, "prompts").splitlines()  # a regular file of a sane size, UTF-8: else one line
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            raise ConfigError(f"{path}:{number}: not a JSON line") from None
        prompt = item.get("prompt") if isinstance(item, dict) else item
        if not isinstance(prompt, str):
            raise ConfigError(f'{path}:{number}: expected {{"prompt": "..."}} or a JSON string')
        prompts.append(prompt)
    if not prompts:
        raise ConfigError(f"{path} holds no prompts")
    return prompts


# ---------------------------------------------------------------- the journal


def _parse(line: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def read_probe(path: Path | str, *, whole: bool = False) -> ProbeRun:
    """Read a probe JSONL; a torn last line (an interrupted write) is ignored, or with
    ``whole`` refused: a certificate is never drawn from a file still being written or cut."""
    from specgauge import inputs

    path = Path(path)
    data = inputs.read_input_bytes(path, "")  # a regular file of a sane size: else one line, exit 2
    if whole and data and not data.endswith(b"\n"):
        raise InputFileError(f"{path} ends mid-line (a probe still writing, or a cut copy): rerun the probe with "
                             "the same options to finish it, or remove the torn last line")
    lines = data.split(b"\n")
    header = _parse(lines[0]) if lines else None
    if not header or header.get("format") != FORMAT:
        raise InputFileError(f"{path} is not a specgauge probe file (no {FORMAT} header)")
    params, prompts = header.get("params"), header.get("prompts")
    if not (isinstance(params, dict) and isinstance(params.get("max_tokens"), int) and params["max_tokens"] >= 1
            and isinstance(prompts, list) and all(isinstance(p, str) for p in prompts)
            and isinstance(header.get("capabilities", {}), dict)):
        raise InputFileError(f"{path}: the header is malformed (it needs params with max_tokens, and the prompts)")
    records = [r for r in map(_parse, lines[1:]) if r is not None and "p" in r and "s" in r]
    n_prompts = len(header.get("prompts") or [])
    for r in records:
        if not _valid_record(r, n_prompts):
            raise InputFileError(f"{path}: a sample line is malformed (prompt index {r['p']!r} of {n_prompts}, "
                              f"text {type(r.get('text')).__name__}): {json.dumps(r)[:120]}")
    return ProbeRun(header, records, path)


#: A log-probability a server returns may exceed 0 by this much (rounding), no more.
LOGPROB_ROUNDING = 1e-4


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _valid_record(r: Mapping[str, Any], n_prompts: int) -> bool:
    """A sample line as the probe writes it: the fields compare reads, of the types it reads."""
    def pairs(row: Any) -> bool:  # [token, log-probability]: not NaN, not above 0 (beyond rounding)
        return isinstance(row, list) and all(isinstance(e, list) and len(e) == 2 and isinstance(e[0], str)
                                             and isinstance(e[1], (int, float)) and not isinstance(e[1], bool)
                                             and e[1] <= LOGPROB_ROUNDING for e in row)
    return (_is_int(r["p"]) and 0 <= r["p"] < n_prompts and _is_int(r["s"]) and isinstance(r.get("text"), str)
            and _is_int(r.get("r", 0)) and isinstance(r.get("finish", ""), (str, type(None)))
            and isinstance(r.get("tokens", []), list) and all(isinstance(t, str) for t in r.get("tokens", []))
            and isinstance(r.get("token_ids", []), list) and all(_is_int(t) for t in r.get("token_ids", []))
            and isinstance(r.get("top", []), list) and all(pairs(row) for row in r.get("top", [])))


class _Journal:
    """Append-only writer: one ``write`` per line on an O_APPEND descriptor."""

    def __init__(self, path: Path) -> None:
        try:
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as exc:
            raise ConfigError(f"cannot write {str(path)!r}: {exc.strerror}") from None

    def write(self, entries: Iterable[Mapping[str, Any]]) -> None:
        data = b"".join(json.dumps(e, separators=(",", ":")).encode() + b"\n" for e in entries)
        if data:
            os.write(self._fd, data)

    def close(self) -> None:
        os.fsync(self._fd)
        os.close(self._fd)


def _truncate_torn_tail(path: Path) -> None:
    """Cut an unterminated last line so that appends start on a fresh line."""
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        with open(path, "r+b") as fh:
            fh.truncate(data.rfind(b"\n") + 1)


# ---------------------------------------------------------------- HTTP


class _RateLimit:
    def __init__(self, rps: float | None) -> None:
        self._gap = 1.0 / rps if rps else 0.0
        self._next = 0.0
        self._lock = asyncio.Lock()

    async def wait(self) -> None:
        if not self._gap:
            return
        async with self._lock:
            now = time.monotonic()
            delay = self._next - now
            self._next = max(now, self._next) + self._gap
        if delay > 0:
            await asyncio.sleep(delay)


def _base_url(url: str) -> str:
    url = url.rstrip("/")
    return url if url.endswith("/v1") else url + "/v1"


def _snippet(response) -> str:
    text = response.text.strip().replace("\n", " ")
    return text[:160] + ("..." if len(text) > 160 else "")


class _Client:
    """The HTTP side: retries, backoff, rate limit, one clear line per failure."""

    def __init__(self, url: str, client_config: ClientConfig, transport=None) -> None:
        import httpx2

        self._httpx = httpx2
        self.base = _base_url(url)
        self.cfg = client_config
        headers = {"Authorization": f"Bearer {client_config.api_key}"} if client_config.api_key else {}
        # httpcore scans every pooled connection on each request (O(pool) per request): many small
        # pools, used in turn, keep that cost flat at high concurrency
        shards = -(-client_config.concurrency // POOL_SIZE)
        per = -(-client_config.concurrency // shards)
        limits = httpx2.Limits(max_connections=per, max_keepalive_connections=per)
        verify = ssl.create_default_context()  # one context for all clients: loading the CA store costs ~0.3 s
        self._pool = [httpx2.AsyncClient(base_url=self.base, headers=headers, limits=limits, transport=transport,
                                         verify=verify, timeout=httpx2.Timeout(client_config.timeout_s))
                      for _ in range(shards)]
        self._turn = itertools.cycle(self._pool)
        self.limit = _RateLimit(client_config.max_rps)
        self.notify: Callable[[str], None] = lambda line: None  # one line per wait (a retry, a backoff)

    async def close(self) -> None:
        for http in self._pool:
            await http.aclose()

    async def request(self, method: str, path: str, body: Mapping[str, Any] | None = None):
        httpx = self._httpx
        for attempt in range(self.cfg.retries + 1):
            await self.limit.wait()
            try:
                async with asyncio.timeout(self.cfg.timeout_s):  # the whole exchange: an endless body ends too
                    response = await next(self._turn).request(method, path, json=body)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                if attempt == self.cfg.retries:
                    raise ServerError(f"cannot reach {self.base}: {exc or type(exc).__name__}") from None
                why, retry_after = f"cannot connect ({exc or type(exc).__name__})", None
            except (httpx.TransportError, TimeoutError) as exc:
                what = (f"no complete answer within --timeout {self.cfg.timeout_s:g} s"
                        if isinstance(exc, (TimeoutError, httpx.TimeoutException)) else
                        f"connection failed: {exc or type(exc).__name__}")
                if attempt == self.cfg.retries:
                    raise ServerError(f"{self.base}{path}: {what}") from None
                why, retry_after = what, None
            else:
                if response.status_code != 429 and response.status_code < 500:
                    return response
                if attempt == self.cfg.retries:
                    raise ServerError(f"{self.base}{path} answered HTTP {response.status_code} after "
                                      f"{self.cfg.retries} retries: {_snippet(response)}")
                why, retry_after = f"HTTP {response.status_code}", response.headers.get("retry-after")
            delay = min(8.0, self.cfg.backoff_s * 2 ** attempt)
            try:
                asked = float(retry_after) if retry_after else None
            except ValueError:
                asked = None
            if asked is not None and math.isfinite(asked) and asked >= 0:
                delay = min(asked, self.cfg.max_retry_after_s)
                why += f", Retry-After {asked:g} s" + (f" (capped at {delay:g} s)" if asked > delay else "")
            self.notify(f"{self.base}{path}: {why}; retry {attempt + 1} of {self.cfg.retries} in {delay:.3g} s")
            await asyncio.sleep(delay)
        raise AssertionError("unreachable")

    async def json(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> tuple[int, Any]:
        response = await self.request(method, path, body)
        try:
            return response.status_code, response.json()
        except ValueError:
            raise ServerError(f"{self.base}{path} did not answer like an OpenAI-compatible server "
                              f"(HTTP {response.status_code}, not JSON: {_snippet(response)!r})") from None


async def _models(client: _Client) -> dict[str, Any]:
    status, payload = await client.json("GET", "/models")
    if status != 200 or not isinstance(payload, dict) or not isinstance(payload.get("data"), list):
        raise ServerError(f"{client.base}/models did not answer like an OpenAI-compatible server "
                          f"(HTTP {status}: {json.dumps(payload)[:160]})")
    return payload


# ---------------------------------------------------------------- request and reply


def _body(cfg: ProbeConfig, model: str, prompt: str, n: int, logprobs: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "max_tokens": cfg.max_tokens, "temperature": cfg.temperature}
    if cfg.endpoint == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    if cfg.top_p is not None:
        body["top_p"] = cfg.top_p
    if cfg.top_k is not None:
        body["top_k"] = cfg.top_k
    if cfg.min_p is not None:
        body["min_p"] = cfg.min_p
    if cfg.stop is not None:
        body["stop"] = list(cfg.stop)
    if n > 1:
        body["n"] = n
    if logprobs and cfg.top_logprobs > 0:
        if cfg.endpoint == "chat":
            body.update(logprobs=True, top_logprobs=cfg.top_logprobs)
        else:
            body["logprobs"] = cfg.top_logprobs
    body.update(cfg.extra_body)
    return body


def _token_id(token: str) -> int | None:
    return int(token[9:]) if token.startswith("token_id:") and token[9:].lstrip("-").isdigit() else None


def _parse_choice(choice: Mapping[str, Any], endpoint: str) -> dict[str, Any]:
    """One sample: its text, and its tokens, logprobs and top logprobs where the server gave them."""
    if endpoint == "chat":
        text = (choice.get("message") or {}).get("content")
    else:
        text = choice.get("text")
    if not isinstance(text, str):
        raise ServerError(f"a choice has no text: {json.dumps(choice)[:160]}")
    record: dict[str, Any] = {"text": text}
    if choice.get("finish_reason") is not None:
        record["finish"] = choice["finish_reason"]  # "stop": ended before L tokens
    lp = choice.get("logprobs")
    tokens = logprobs = top = None
    if isinstance(lp, dict) and endpoint == "chat" and isinstance(lp.get("content"), list):
        content = lp["content"]
        tokens = [c["token"] for c in content]
        if content and all(_is_int(c.get("id")) for c in content):  # llama.cpp gives each token's id
            record["token_ids"] = [c["id"] for c in content]
        logprobs = [c["logprob"] for c in content]
        top = [_top_pairs(c.get("top_logprobs")) for c in content]
    elif isinstance(lp, dict) and isinstance(lp.get("tokens"), list):
        tokens, logprobs = lp["tokens"], lp.get("token_logprobs")
        top = [_top_pairs(d) for d in lp.get("top_logprobs") or []]
    if tokens is not None:
        record["tokens"] = tokens
        if logprobs is not None:
            record["logprobs"] = logprobs
        if top and any(top):
            record["top"] = top
    ids = choice.get("token_ids")
    if "token_ids" in record:
        pass
    elif isinstance(ids, list) and all(isinstance(i, int) for i in ids):
        record["token_ids"] = ids
    elif tokens and all(_token_id(t) is not None for t in tokens):
        record["token_ids"] = [_token_id(t) for t in tokens]
    elif tokens == [] and lp is not None:  # no token at all (it stopped at once): no naming to read
        record["token_ids"] = []
    return record


def _top_pairs(entry: Any) -> list[list]:
    """One position's top logprobs as [token, logprob] pairs, from the shapes servers return:
    a {token: logprob} mapping (OpenAI completions), a list of {"token", "logprob"} objects
    (chat), or a list of [token, logprob] pairs."""
    if not entry:
        return []
    if isinstance(entry, dict):
        pairs = list(entry.items())
    elif isinstance(entry, list):
        pairs = [(e.get("token"), e.get("logprob")) if isinstance(e, dict) else
                 tuple(e) if isinstance(e, (list, tuple)) and len(e) == 2 else (None, None) for e in entry]
    else:
        pairs = [(None, None)]
    if not all(isinstance(t, str) and isinstance(v, (int, float)) for t, v in pairs):
        raise ServerError(f"top_logprobs in an unknown shape (expected {{token: logprob}}, [{{token, logprob}}] "
                          f"or [[token, logprob]]): {json.dumps(entry)[:120]}")
    if not all(v <= LOGPROB_ROUNDING for _, v in pairs):  # NaN fails this too
        raise ServerError(f"top_logprobs holds a value that is not a log-probability (NaN or above 0): "
                          f"{json.dumps(entry)[:120]}")
    return [[t, float(v)] for t, v in pairs]


async def _complete(client: _Client, cfg: ProbeConfig, model: str, prompt: str, n: int,
                    caps: dict[str, bool]) -> list[dict[str, Any]]:
    path = "/chat/completions" if cfg.endpoint == "chat" else "/completions"
    status, payload = await client.json("POST", path, _body(cfg, model, prompt, n if caps["n"] else 1, caps["logprobs"]))
    if status != 200:
        raise ServerError(f"{client.base}{path} refused the request (HTTP {status}): {json.dumps(payload)[:200]}")
    choices = payload.get("choices") if isinstance(payload, dict) else None
    if not isinstance(choices, list) or not choices:
        raise ServerError(f"{client.base}{path} did not answer like an OpenAI-compatible server: "
                          f"{json.dumps(payload)[:160]}")
    return [_parse_choice(c, cfg.endpoint) for c in choices]


async def _negotiate(client: _Client, cfg: ProbeConfig, model: str, prompt: str) -> tuple[dict[str, bool], list]:
    """One real request asking for everything; what comes back says what the server offers."""
    want = {"n": cfg.n > 1, "logprobs": cfg.top_logprobs > 0}
    path = "/chat/completions" if cfg.endpoint == "chat" else "/completions"
    status, payload = await client.json("POST", path, _body(cfg, model, prompt, min(cfg.n, 2) if want["n"] else 1,
                                                            want["logprobs"]))
    if status in (400, 422) and any(want.values()):  # a strict server refusing n or logprobs
        want = {"n": False, "logprobs": False}
        status, payload = await client.json("POST", path, _body(cfg, model, prompt, 1, False))
    if 400 <= status < 500:
        raise ServerError(f"{client.base}{path} refused the request (HTTP {status}): {json.dumps(payload)[:200]}")
    if status != 200 or not isinstance(payload, dict) or not isinstance(payload.get("choices"), list):
        raise ServerError(f"{client.base}{path} did not answer like an OpenAI-compatible server "
                          f"(HTTP {status}: {json.dumps(payload)[:200]})")
    samples = [_parse_choice(c, cfg.endpoint) for c in payload["choices"]]
    caps = {"n": want["n"] and len(samples) > 1, "logprobs": want["logprobs"] and "tokens" in samples[0],
            "token_ids": any(s.get("token_ids") for s in samples)}
    return caps, samples


# ---------------------------------------------------------------- the probe


@dataclass(frozen=True)
class ProbeSummary:
    path: Path
    drawn: int          # samples drawn by this call
    total: int          # samples in the file now
    seconds: float
    capabilities: Mapping[str, bool]

    @property
    def samples_per_second(self) -> float:
        return self.drawn / self.seconds if self.seconds > 0 else math.inf


def _check_resume(path: Path, header: Mapping[str, Any], cfg: ProbeConfig, prompts: list[str]) -> None:
    old = header.get("params", {})
    new = cfg.params()
    if old.get("model") is None:
        new["model"] = None
    free = ("model", "samples_per_prompt")  # more or fewer draws of the same law: a sized run extends its pilot
    diffs = [f"{k} {old.get(k)!r} vs {new.get(k)!r}" for k in new if k not in free and old.get(k) != new.get(k)]
    if header.get("prompts") != prompts:
        diffs.append("the prompts differ")
    if diffs:
        raise ConfigError(f"{path} was drawn with other parameters ({'; '.join(diffs)}); "
                          "write to a new file or remove it")


def probe(cfg: ProbeConfig, prompts: list[str], out: Path | str, *, client_config: ClientConfig = ClientConfig(),
          transport=None, progress: bool | str = False, max_samples: int | None = None,
          stream: TextIO | None = None, watchers: Sequence[Any] = ()) -> ProbeSummary:
    """Fill ``out`` up to ``samples_per_prompt`` samples for every prompt (resuming what is there).

    ``transport``: an httpx2 transport (e.g. ``httpx2.ASGITransport(app)``) for in-process
    servers. ``max_samples`` stops after about that many new samples (tests interrupt with it).
    ``progress``: ``"bar"``, ``"lines"`` (a line every few seconds, for logs) or ``"off"``
    (True: bar); waits (retries, a silent server) are one line each on ``stream`` unless off.
    Raises :class:`ServerError` with one line for an unreachable or non-OpenAI server,
    :class:`TemperatureIgnoredError` when sampling gave one answer per prompt throughout and
    :class:`DeadlineError` when ``client_config.deadline_s`` passed (the file keeps what landed).
    ``watchers``: objects with ``add(records)``, ``check()`` (raises to stop the probe) and
    ``stopped``, fed every sample as it lands, those already in the file first (an early test).
    """
    mode = {True: "bar", False: "off"}.get(progress, progress) if isinstance(progress, bool) else progress
    return asyncio.run(_probe(cfg, prompts, Path(out), client_config, transport, mode, max_samples, stream,
                              tuple(watchers)))


async def _probe(cfg, prompts, out: Path, client_config, transport, mode, max_samples, stream,
                 watchers) -> ProbeSummary:
    if not prompts:
        raise ConfigError("no prompts to probe")
    if not out.parent.is_dir():
        raise ConfigError(f"cannot write {str(out)!r}: the folder {str(out.parent)!r} does not exist")
    if out.is_dir():
        raise ConfigError(f"cannot write {str(out)!r}: it is a folder")
    started = time.monotonic()
    talk = Progress(0, "probe", mode="off", stream=stream, talk=mode != "off")
    client = _Client(cfg.url, client_config, transport)
    client.notify = lambda line: talk.say(f"probe: {line}")
    state = _State(talk, f"{client.base}/models to answer", started)
    count = [0]  # samples written by this call, kept when the deadline cuts the run
    try:
        async with asyncio.timeout(client_config.deadline_s), state.heartbeat():
            await _fill(cfg, prompts, out, client, mode, max_samples, stream, state, count, watchers)
    except TimeoutError:
        raise DeadlineError(f"the probe's deadline ({client_config.deadline_s:g} s) passed while waiting for "
                            f"{state.what}: {count[0]} new samples are in {out}; rerun to resume") from None
    finally:
        await client.close()
    return ProbeSummary(out, count[0], state.total, time.monotonic() - started, state.caps)


class _State:
    """What the probe waits for now; a line every ``QUIET_S`` seconds while nothing lands."""

    QUIET_S = 15.0

    def __init__(self, talk: Progress, what: str, now: float) -> None:
        self.talk, self.what, self.last = talk, what, now
        self.total, self.caps = 0, {}

    def landed(self) -> None:
        self.last = time.monotonic()

    @contextlib.asynccontextmanager
    async def heartbeat(self):
        async def beat() -> None:
            while True:
                await asyncio.sleep(1.0)
                quiet = time.monotonic() - self.last
                if quiet >= self.QUIET_S:
                    self.talk.say(f"probe: waiting for {self.what} (nothing back for {quiet:.0f} s)")
                    self.last = time.monotonic()
        task = asyncio.create_task(beat())
        try:
            yield
        finally:
            task.cancel()


async def _fill(cfg, prompts, out, client, mode, max_samples, stream, state, count, watchers) -> None:
    done: set[tuple[int, int]] = set()
    if out.exists() and out.stat().st_size > 0:
        run = read_probe(out)
        _check_resume(out, run.header, cfg, prompts)
        _truncate_torn_tail(out)
        header = run.header
        done = {(r["p"], r["s"]) for r in run.records}
        caps = header["capabilities"]
        model = header["model"]
        journal = _Journal(out)
        first: list[dict[str, Any]] = []
        watch = _Watchers([_SamplingWatch(cfg, len(prompts), run.records), *watchers], run.records)
        requests = itertools.count(1 + max((r.get("r", -1) for r in run.records), default=-1))
    else:
        models = await _models(client)
        model = cfg.model or (models["data"][0].get("id") if models["data"] else None)
        if not model:
            raise ServerError(f"{client.base}/models lists no model; pass the model name")
        state.what = f"the first completion from {client.base} (asking what it offers: n, logprobs)"
        caps, first = await _negotiate(client, cfg, model, prompts[0])
        state.landed()
        header = {"format": FORMAT, "url": client.base, "model": model, "models": models,
                  "params": {**cfg.params(), "model": model}, "prompts": prompts, "capabilities": caps,
                  "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                  "specgauge_version": specgauge.__version__}
        journal = _Journal(out)
        journal.write([header])
        watch = _Watchers([_SamplingWatch(cfg, len(prompts), [{"p": 0, **rec} for rec in first]), *watchers],
                          [{"p": 0, **rec} for rec in first])
        first = [{**rec, "r": 0} for rec in first]
        requests = itertools.count(1)
    state.caps, state.total = caps, len(done)
    todo = {p: [s for s in range(cfg.samples_per_prompt) if (p, s) not in done] for p in range(len(prompts))}
    if first:
        taken, todo[0] = todo[0][:len(first)], todo[0][len(first):]
        journal.write({"p": 0, "s": s, **rec} for s, rec in zip(taken, first))
        count[0] += len(taken)
        state.total += len(taken)
    per = cfg.n if caps["n"] else 1
    chunks = [(i, p, idx[i:i + per]) for p, idx in todo.items() for i in range(0, len(idx), per)]
    jobs = [(p, idx) for _, p, idx in sorted(chunks, key=lambda c: (c[0], c[1]))]  # round-robin over prompts
    if max_samples is not None:
        budget, kept = max_samples - count[0], []
        for p, idx in jobs:
            if budget <= 0:
                break
            kept.append((p, idx[:budget]))
            budget -= len(idx[:budget])
        jobs = kept
    state.what = f"completions from {client.base} ({client.cfg.concurrency} requests in flight, " \
                 f"--timeout {client.cfg.timeout_s:g} s each)"
    try:
        watch.check()
        await _run_jobs(client, cfg, model, prompts, caps, jobs, journal, watch, client.cfg.concurrency,
                        Progress(sum(len(idx) for _, idx in jobs), "probe", mode=mode, stream=stream),
                        requests, state, count)
    finally:
        journal.close()


async def _run_jobs(client, cfg, model, prompts, caps, jobs, journal, watch, concurrency, bar: Progress,
                    requests: Iterator[int], state: _State, count: list[int]) -> None:
    semaphore = asyncio.Semaphore(concurrency)

    async def one(p: int, indices: list[int]) -> None:
        got: list[dict[str, Any]] = []
        async with semaphore:
            if watch.stopped:
                return
            while len(got) < len(indices):  # a server may return fewer choices than `n`
                need = len(indices) - len(got)
                rid = next(requests)  # the request: the unit of independence when n > 1
                got += [{**rec, "r": rid} for rec in await _complete(client, cfg, model, prompts[p], need, caps)]
        records = [{"p": p, "s": s, **rec} for s, rec in zip(indices, got)]
        journal.write(records)
        count[0] += len(indices)
        state.total += len(indices)
        state.landed()
        bar.update(len(indices))
        watch.add(records)
        watch.check()

    tasks = [asyncio.create_task(one(p, idx)) for p, idx in jobs]
    try:
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        bar.close()


class _Watchers:
    """Several watchers fed as one; the first (the temperature watch) has seen ``records`` already."""

    def __init__(self, watchers: list, records: Iterable[Mapping[str, Any]]) -> None:
        self.watchers = watchers
        for w in watchers[1:]:
            w.add(records)

    @property
    def stopped(self) -> bool:
        return any(w.stopped for w in self.watchers)

    def add(self, records) -> None:
        for w in self.watchers:
            w.add(records)

    def check(self) -> None:
        for w in self.watchers:
            w.check()


class _SamplingWatch:
    """A server that ignores the temperature returns one answer per prompt, every time.

    Fed every sample as it lands (jobs run round-robin over the prompts), it stops the
    probe as soon as each prompt has ``MIN_SEEN`` samples and every one of them is the
    same answer, rather than after the whole budget.
    """

    MIN_SEEN = 5

    def __init__(self, cfg: ProbeConfig, n_prompts: int, records: Iterable[Mapping[str, Any]]) -> None:
        self.cfg = cfg
        self.answers: list[set[str]] = [set() for _ in range(n_prompts)]
        self.seen = [0] * n_prompts
        self.active = cfg.temperature > 0 and cfg.samples_per_prompt >= self.MIN_SEEN
        self.stopped = False  # set once the check failed: requests not yet sent are dropped
        self.add(records)

    def add(self, records: Iterable[Mapping[str, Any]]) -> None:
        for r in records:
            self.answers[r["p"]].add(r["text"])
            self.seen[r["p"]] += 1

    def check(self) -> None:
        if (self.active and min(self.seen) >= self.MIN_SEEN
                and all(len(a) == 1 for a in self.answers)):
            self.stopped = True
            raise TemperatureIgnoredError(
                f"the server ignored the temperature ({self.cfg.temperature:g}): all {min(self.seen)}+ samples "
                f"of each of the {len(self.answers)} prompts are identical")
