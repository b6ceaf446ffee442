"""Vocabulary, framing per architecture, padding invariance, held-out disjointness,
and metrics computed the way users get answers; where a method does not apply (a
language model answers no question), the error says what does."""

import pytest
import torch
import torch.nn.functional as F
from conftest import ROOT
from torch import nn

import tinytf
from tinytf.config import TaskConfig, config_from_dict
from tinytf.data.batch import IGNORE, single_pair
from tinytf.data.framing import get_framing
from tinytf.data.heldout import TaskData, example_hashes
from tinytf.errors import ConfigError, NotApplicableError, UserError
from tinytf.inspect.evaluate import evaluate, predict, scored_loss
from tinytf.run.setup import check_config
from tinytf.tasks import CONSTRUCTIONS, TASKS, Pairs, get_task
from tinytf.tasks.vocab import UnknownTokenError, Vocabulary

ARCHS = ["encoder", "decoder", "encoder-decoder"]


def pairs_of(task, examples):
    """Hand-written (source, target) strings -> Pairs."""
    encoded = [(task.vocab.encode(s), task.vocab.encode(t)) for s, t in examples]
    width_s = max(len(s) for s, _ in encoded)
    width_t = max(len(t) for _, t in encoded)
    source = torch.tensor([s + [0] * (width_s - len(s)) for s, _ in encoded])
    target = torch.tensor([t + [0] * (width_t - len(t)) for _, t in encoded])
    return Pairs(source, torch.tensor([len(s) for s, _ in encoded]), target, torch.tensor([len(t) for _, t in encoded]))


# ---- vocabulary


def test_vocabulary_round_trip_and_specials():
    vocab = Vocabulary(["the", "cat", "sat"], split="word")
    assert vocab.tokens[:4] == ["<pad>", "<bos>", "<sep>", "<eos>"] and vocab.pad_id == 0
    ids = vocab.encode("the cat  sat\n")
    assert vocab.decode(ids) == ["the", "cat", "sat"]
    assert vocab.join(vocab.decode(ids)) == "the cat sat"
    assert Vocabulary.from_json(vocab.to_json()) == vocab


def test_char_vocabulary_ignores_spaces_it_does_not_know():
    vocab = Vocabulary(list("0123456789+"), split="char")
    assert vocab.decode(vocab.encode("12 + 34")) == list("12+34")


def test_unknown_tokens_are_named():
    vocab = Vocabulary(["a", "b"], split="word")
    with pytest.raises(
        UnknownTokenError, match=r"unknown tokens 'dog', 'cat'; the vocabulary has 2 tokens besides its specials: a b$"
    ):
        vocab.encode("a dog b cat dog")


def test_vocabulary_file_errors(tmp_path):
    with pytest.raises(UserError, match="not found"):
        Vocabulary.load(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text('{"split": "word", "tokens": ["a"]}')
    with pytest.raises(UserError, match="first tokens must be"):
        Vocabulary.load(tmp_path / "bad.json")
    saved = tmp_path / "ok.json"
    Vocabulary(["x"], "char").save(saved)
    assert Vocabulary.load(saved) == Vocabulary(["x"], "char")


# ---- framing


def test_decoder_framing_scores_only_the_answer():
    task = get_task(TaskConfig(name="reverse"))
    batch = get_framing(task, "decoder").frame(pairs_of(task, [("1 2 3", "3 2 1"), ("4 5", "5 4")]))
    decode = task.vocab.decode
    assert decode(batch.tokens[0]) == ["1", "2", "3", "<sep>", "3", "2", "1"]
    assert decode(batch.tokens[1]) == ["4", "5", "<sep>", "5", "4", "<pad>", "<pad>"]
    # position j predicts token j + 1: scored from <sep> on, up to <eos>
    assert batch.labels[0].tolist()[:3] == [IGNORE] * 3
    assert decode(batch.labels[0, 3:]) == ["3", "2", "1", "<eos>"]
    assert batch.labels[1].tolist()[:2] == [IGNORE] * 2
    assert decode(batch.labels[1, 2:5]) == ["5", "4", "<eos>"]
    assert batch.labels[1].tolist()[5:] == [IGNORE] * 2
    assert batch.pad_mask is None and batch.source is None


def test_encoder_framing_with_bos_and_eos_filler():
    task = get_task(TaskConfig(name="most-freq", bos=True))
    batch = get_framing(task, "encoder").frame(pairs_of(task, [("1 2 2", "2 1"), ("3", "3")]))
    decode = task.vocab.decode
    assert decode(batch.tokens[0]) == ["<bos>", "1", "2", "2"]
    assert batch.labels[0, 0] == IGNORE and decode(batch.labels[0, 1:]) == ["2", "1", "<eos>"]
    assert decode(batch.tokens[1]) == ["<bos>", "3", "<pad>", "<pad>"]
    assert batch.pad_mask.tolist() == [[False] * 4, [False, False, True, True]]
    assert batch.labels[1].tolist()[2:] == [IGNORE, IGNORE]


def test_bos_goes_before_the_source_in_every_framing_that_reads_one():
    task = get_task(TaskConfig(name="reverse", bos=True))
    pairs = pairs_of(task, [("1 2 3", "3 2 1"), ("4", "4")])
    decode = task.vocab.decode
    decoder = get_framing(task, "decoder").frame(pairs)
    assert decode(decoder.tokens[0]) == ["<bos>", "1", "2", "3", "<sep>", "3", "2", "1"]
    assert decoder.labels[0, :4].tolist() == [IGNORE] * 4 and decode(decoder.labels[0, 4:]) == ["3", "2", "1", "<eos>"]
    assert decode(decoder.tokens[1, :4]) == ["<bos>", "4", "<sep>", "4"]
    encoder_decoder = get_framing(task, "encoder-decoder").frame(pairs)
    assert decode(encoder_decoder.source[0]) == ["<bos>", "1", "2", "3"]
    assert encoder_decoder.source_pad_mask.tolist() == [[False] * 4, [False, False, True, True]]
    assert decode(encoder_decoder.tokens[0]) == ["<bos>", "3", "2", "1"]  # the decoder's start token, as without
    assert pairs.source.size(1) == 3  # the examples themselves are left as they were


def test_encoder_decoder_framing():
    task = get_task(TaskConfig(name="add"))
    batch = get_framing(task, "encoder-decoder").frame(pairs_of(task, [("17+25", "42"), ("1+2", "3")]))
    decode = task.vocab.decode
    assert decode(batch.source[1]) == ["1", "+", "2", "<pad>", "<pad>"]
    assert batch.source_pad_mask[1].tolist() == [False] * 3 + [True] * 2
    assert decode(batch.tokens[0]) == ["<bos>", "4", "2"] and decode(batch.labels[0]) == ["4", "2", "<eos>"]
    assert decode(batch.tokens[1]) == ["<bos>", "3", "<pad>"]
    assert decode(batch.labels[1, :2]) == ["3", "<eos>"] and batch.labels[1, 2] == IGNORE


def test_language_model_framing_predicts_the_next_word():
    task = get_task(TaskConfig(name="sentences"))
    pairs = task.sample(4, torch.Generator().manual_seed(0))
    batch = get_framing(task, "decoder").frame(pairs)
    for i in range(4):
        length = int(pairs.target_len[i])
        assert batch.tokens[i, : length - 1].tolist() == pairs.target[i, : length - 1].tolist()
        assert batch.labels[i, : length - 1].tolist() == pairs.target[i, 1:length].tolist()
        assert (batch.labels[i, length - 1 :] == IGNORE).all()


def test_a_language_model_answers_no_question_and_the_error_names_what_it_does_instead():
    config = config_from_dict(
        {"task": {"name": "sentences"}, "model": {"arch": "decoder", "d_model": 16, "n_heads": 2, "n_layers": 1}}
    )
    model, task = tinytf.build_model(config).eval(), get_task(config.task)
    framing = get_framing(task, "decoder")
    prompt = framing.typed_input("the cat", model.config.max_len)
    assert not framing.answers_questions
    with pytest.raises(NotApplicableError, match="continues text") as raised:
        framing.answers(model, single_pair(prompt))
    assert isinstance(raised.value, NotImplementedError)
    # What the message offers instead works: a continuation, as text and as ids.
    assert "tinytf.evaluate.predict(model, framing, texts)" in str(raised.value)
    ((read, written),) = predict(model, framing, ["the cat"])
    assert read == ["<bos>", "the", "cat"] and written
    assert "framing.answer_typed(model, [framing.typed_input(text, model.config.max_len)])" in str(raised.value)
    assert framing.vocab.decode(framing.answer_typed(model, [prompt])[0]) == written


def test_a_task_without_constructions_says_which_tasks_draw_minimal_pairs():
    with pytest.raises(NotApplicableError) as raised:
        get_task(TaskConfig(name="sort")).held_out_pairs("subject", 10)
    assert "'sort' draws no minimal pairs" in str(raised.value) and "tinytf.tasks.CONSTRUCTIONS" in str(raised.value)
    assert set(CONSTRUCTIONS) >= {"sentences", "modular-add"}


def configured(name, arch, tmp_path, **task_keys):
    """A small config for `name` x `arch`, checked against the task (`tinytf.load_config`'s checks)."""
    path = tmp_path / "corpus.txt"
    path.write_text("the quick brown fox jumps over the lazy dog. " * 40)
    wanted = {"path": str(path), "max_len": 8} | task_keys
    keys = {key: value for key, value in wanted.items() if key in TASKS[name].config_keys}
    return check_config(
        config_from_dict(
            {
                "task": {"name": name, "eval_size": 20} | keys,
                "model": {"arch": arch, "d_model": 16, "n_heads": 2, "n_layers": 2, "d_ff": 32},
            }
        )
    )


PAIRINGS = [(name, arch) for name in sorted(TASKS) for arch in ARCHS]


@pytest.mark.parametrize("name, arch", PAIRINGS)
def test_every_pairing_trains_a_step_or_is_a_config_error(name, arch, tmp_path):
    if arch not in TASKS[name].archs:
        with pytest.raises(ConfigError) as caught:
            configured(name, arch, tmp_path)
        message = str(caught.value)
        assert f"'{name}'" in message and f"model.arch={arch}" in message
        assert ", ".join(TASKS[name].archs) in message
        return
    config = configured(name, arch, tmp_path)
    task = get_task(config.task)
    model = tinytf.build_model(config)
    assert model.vocab_size == len(task.vocab)
    batch = get_framing(task, arch).frame(TaskData(task, seed=0, eval_size=20).train_pairs(8))
    loss = scored_loss(model(**batch.model_inputs()), batch.labels)
    loss.backward()
    assert torch.isfinite(loss) and model.token_embedding.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("name, arch", [p for p in PAIRINGS if p[1] in TASKS[p[0]].archs])
def test_padding_never_changes_an_example_s_logits(name, arch, tmp_path):
    config = configured(name, arch, tmp_path, min_len=2)
    task = get_task(config.task)
    model = tinytf.build_model(config).eval()
    pairs = task.sample(6, torch.Generator().manual_seed(1))
    batched = get_framing(task, arch).frame(pairs)
    logits = model(**batched.model_inputs())
    for i in range(6):
        alone = get_framing(task, arch).frame(pairs[i : i + 1])
        assert alone.tokens.size(1) <= batched.tokens.size(1)
        alone_logits = model(**alone.model_inputs())
        width = alone.tokens.size(1)
        scored = alone.labels[0] != IGNORE
        torch.testing.assert_close(logits[i, :width][scored], alone_logits[0][scored], atol=1e-5, rtol=1e-5)


# ---- held-out set


@pytest.mark.parametrize("vocab_size", [3, 10, 15, 16, 40])
def test_scored_loss_is_cross_entropy_over_scored_positions(vocab_size):
    """Small vocabularies pad their logits to 16 classes (a faster CPU kernel): the loss and
    its gradient stay those of plain cross-entropy over the scored positions."""
    torch.manual_seed(vocab_size)
    logits = (torch.randn(4, 6, vocab_size) * 2).requires_grad_()
    labels = torch.randint(0, vocab_size, (4, 6))
    labels[:, :2] = IGNORE  # unscored, as a decoder's prompt
    scored = labels != IGNORE
    loss = scored_loss(logits, labels)
    expected = F.cross_entropy(logits[scored], labels[scored])
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(scored_loss(logits, labels, reduction="sum"), expected * scored.sum())
    (gradient,) = torch.autograd.grad(loss, logits)
    (expected_gradient,) = torch.autograd.grad(expected, logits)
    torch.testing.assert_close(gradient, expected_gradient)
    assert gradient[:, :2].abs().max() == 0  # nothing flows from unscored positions
    labels[0, -1] = vocab_size  # past the vocabulary (and under 16): an error, not inf
    with pytest.raises(IndexError):
        scored_loss(logits, labels)


def test_training_stream_never_draws_a_held_out_example():
    task = get_task(TaskConfig(name="sort", vocab_size=3, min_len=2, max_len=3))  # 36 distinct sources
    data = TaskData(task, seed=0, eval_size=10)
    held_out = set(example_hashes(data.held_out).tolist())
    drawn = set()
    for _ in range(50):
        pairs = data.train_pairs(64)
        assert len(pairs) == 64
        hashes = set(example_hashes(pairs).tolist())
        assert not hashes & held_out
        drawn |= hashes
    assert len(drawn) + len(held_out) == 36  # everything else does get drawn
    assert len(data.held_out) == len(held_out)  # the held-out examples are distinct


@pytest.mark.parametrize("name", ["dyck-1", "add"])
def test_tasks_with_many_held_out_draws_usually_sample_once_per_batch(name, monkeypatch):
    # A quarter of dyck-1's draws (a tenth of add's) are held-out inputs; drawing a batch
    # must not take two rounds of sampling each time.
    data = TaskData(get_task(TaskConfig(name=name)), seed=0, eval_size=1000)
    calls = []
    original = data.task.sample
    monkeypatch.setattr(data.task, "sample", lambda n, generator: calls.append(n) or original(n, generator))
    for _ in range(100):
        assert len(data.train_pairs(32)) == 32
    assert len(calls) <= 105
    assert 32 < max(calls) < 64  # more than a batch, but not a double draw


def test_held_out_set_is_fixed_and_seeded():
    task = get_task(TaskConfig(name="copy"))
    first, again = TaskData(task, 0, 50).held_out, TaskData(task, 0, 50).held_out
    assert torch.equal(first.source, again.source)
    assert not torch.equal(first.source, TaskData(task, 1, 50).held_out.source)
    train = TaskData(task, 0, 50).train_pairs(50)
    assert not torch.equal(train.source, first.source)  # a separate seed


def test_a_held_out_set_too_big_for_the_task_is_a_user_error():
    task = get_task(TaskConfig(name="sort", vocab_size=2, min_len=1, max_len=2))  # 6 sources
    with pytest.raises(UserError, match="only 6 distinct examples"):
        TaskData(task, seed=0, eval_size=100)


def test_training_stream_state_resumes():
    data = TaskData(get_task(TaskConfig(name="copy")), 0, 10)
    data.train_pairs(5)
    state = data.state_dict()
    expected = data.train_pairs(5)
    other = TaskData(get_task(TaskConfig(name="copy")), 0, 10)
    other.load_state_dict(state)
    assert torch.equal(other.train_pairs(5).source, expected.source)


# ---- metrics: an oracle model must score 1.0, a model wrong in one place must not


class CopyOracle(nn.Module):
    """Predicts the right token for the copy task from the tokens it sees (no training)."""

    def __init__(self, task, arch, mistake_at=None, mistake_if_first=None):
        super().__init__()
        self.config = config_from_dict({"model": {"arch": arch}}).model
        self.vocab = task.vocab
        self.mistake_at = mistake_at  # answer position where the oracle is wrong
        self.mistake_if_first = mistake_if_first  # ... only in examples whose first symbol is one of these
        self.anchor = nn.Parameter(torch.zeros(()))
        self.read_bos = set()  # whether the source it read began with <bos>, per source read

    def forward(self, tokens, *, source=None, pad_mask=None, source_pad_mask=None):
        return self._logits(tokens, source, source_pad_mask)

    # the generation interface: encode once, decode with a cache of what was fed so far
    def encode(self, source, source_pad_mask=None):
        return source, []

    def new_cache(self):
        return []

    def decode(self, tokens, *, context=None, source_pad_mask=None, pad_mask=None, cache=None):
        if cache is not None:
            cache.append(tokens)
            tokens_so_far = torch.cat(cache, dim=1)
            return self._logits(tokens_so_far, context, source_pad_mask)[:, -tokens.size(1) :], []
        return self._logits(tokens, context, source_pad_mask), []

    def _logits(self, tokens, source, source_pad_mask):
        batch, length = tokens.shape
        answer = torch.full((batch, length), self.vocab.eos_id)
        for b in range(batch):
            row = tokens[b].tolist()
            if self.config.arch == "encoder":
                wanted, offset = row, 0
            elif self.config.arch == "decoder":
                offset = row.index(self.vocab.sep_id)  # position <sep> predicts answer[0]
                wanted = row[:offset]
            else:
                wanted, offset = source[b][~source_pad_mask[b]].tolist(), 0
            starts_with_bos = bool(wanted) and wanted[0] == self.vocab.bos_id  # task.bos
            self.read_bos.add(starts_with_bos)
            if starts_with_bos:
                wanted, offset = wanted[1:], offset + (self.config.arch == "encoder")
            wrong = self.mistake_if_first is None or (wanted and wanted[0] in self.mistake_if_first)
            for k, token in enumerate(wanted):
                if offset + k < length:
                    answer[b, offset + k] = self.vocab.eos_id if k == self.mistake_at and wrong else token
        return nn.functional.one_hot(answer, len(self.vocab)).float() * 10 + self.anchor


@pytest.mark.parametrize("bos", [False, True])
@pytest.mark.parametrize("arch", ARCHS)
def test_metrics_of_a_perfect_and_a_flawed_model(arch, bos):
    task = get_task(TaskConfig(name="copy", min_len=2, max_len=6, bos=bos))
    pairs = task.sample(40, torch.Generator().manual_seed(0))
    perfect = evaluate(CopyOracle(task, arch), get_framing(task, arch), pairs, batch_size=16)
    assert perfect["token_acc"] == 1.0 and perfect["seq_acc"] == 1.0
    oracle = CopyOracle(task, arch)
    answers = get_framing(task, arch).answers(oracle, pairs)
    assert answers == [pairs.example(i)[1] for i in range(40)]
    assert oracle.read_bos == {bos}  # answering puts <bos> before every source exactly when training does

    flawed = evaluate(CopyOracle(task, arch, mistake_at=1), get_framing(task, arch), pairs, batch_size=16)
    assert flawed["seq_acc"] == 0.0  # every example has an answer position 1 (min_len=2)
    assert 0.5 < flawed["token_acc"] < 1.0


@pytest.mark.parametrize("bos", [False, True])
@pytest.mark.parametrize("arch", ARCHS)
def test_seq_acc_is_the_exact_match_rate_of_greedy_generation(arch, bos):
    # evaluate() scores seq_acc teacher-forced; it must equal generating the answers.
    task = get_task(TaskConfig(name="copy", min_len=2, max_len=6, bos=bos))
    pairs = task.sample(60, torch.Generator().manual_seed(1))
    for mistake_at in (0, 1, 5):  # 5: only examples of length 6 are wrong
        oracle = CopyOracle(task, arch, mistake_at=mistake_at, mistake_if_first=set(task.vocab.encode("0 2 4 6 8")))
        answers = get_framing(task, arch).answers(oracle, pairs)
        generated = sum(answer == pairs.example(i)[1] for i, answer in enumerate(answers)) / len(pairs)
        assert 0.0 < generated < 1.0
        assert evaluate(oracle, get_framing(task, arch), pairs, batch_size=16)["seq_acc"] == pytest.approx(generated)


def test_a_vocabulary_save_that_fails_leaves_the_old_file_whole(tmp_path, monkeypatch):
    path = tmp_path / "vocab.json"
    Vocabulary(["the", "cat"], split="word").save(path)
    before = path.read_bytes()

    def full_disk(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("tinytf.files.os.replace", full_disk)  # the write fails at its last step
    with pytest.raises(OSError, match="No space left"):
        Vocabulary(["the", "cat", "sat", "on", "mat"], split="word").save(path)
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["vocab.json"]


def test_the_held_out_sizes_docs_tasks_md_names_are_what_a_run_holds():
    # 1,000 draws with repeats dropped: the figures the page gives, checked against the configs.
    page = (ROOT / "docs" / "tasks.md").read_text()
    for config, sentence in [
        ("quickstart.yaml", "the quickstart's 1,000 draws keep {n:,}"),
        ("dyck-1-decoder.yaml", "`dyck-1-decoder.yaml`'s {n:,}"),
    ]:
        loaded = tinytf.load_config(ROOT / "configs" / config)
        n = len(TaskData(get_task(loaded.task), loaded.seed).held_out)
        assert n < 1000 and sentence.format(n=n) in " ".join(page.split()), config


def test_the_rasp_held_out_counts_docs_results_md_names_are_what_the_configs_hold():
    # "972 distinct ones ...; 799 for dyck-1 and 882 for dyck-2" and most-freq's <eos> positions
    page = " ".join((ROOT / "docs" / "results.md").read_text().split())
    sizes = {}
    for path in sorted((ROOT / "configs" / "rasp").glob("*.yaml")):
        loaded = tinytf.load_config(path)
        task = get_task(loaded.task)
        sizes[path.stem] = held_out = TaskData(task, loaded.seed).held_out
        if path.stem == "most-freq":
            labels = get_framing(task, loaded.model.arch).frame(held_out).labels
            scored, eos = int((labels != IGNORE).sum()), int((labels == task.vocab.eos_id).sum())
            assert f"{eos:,} of its {scored:,} scored positions" in page
    others = {len(held) for name, held in sizes.items() if not name.startswith("dyck")}
    assert len(others) == 1 and f"({others.pop():,} distinct ones" in page
    assert f"{len(sizes['dyck-1']):,} for dyck-1 and {len(sizes['dyck-2']):,} for dyck-2" in page
