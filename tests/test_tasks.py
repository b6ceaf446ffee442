"""Every task against an independent, brute-force reference, plus determinism."""

import os
import random
from collections import Counter

import pytest
import torch
from conftest import unblocked_after

from tinytf import build_model
from tinytf.config import ConfigProblem, TaskConfig, config_from_dict
from tinytf.data.batch import IGNORE
from tinytf.data.framing import get_framing
from tinytf.errors import ConfigError, UserError
from tinytf.run.setup import check_config
from tinytf.tasks import TASKS, get_task
from tinytf.tasks.base import SymbolTask
from tinytf.tasks.sentences import (
    ANTONYMS,
    COPULA,
    DETERMINERS,
    HELD_OUT_ADJECTIVES,
    INTRANSITIVE,
    NOUN_INDEX,
    NOUNS,
    SEMANTIC,
    TRANSITIVE,
    Grammar,
    held_out_adjectives,
    minimal_pairs,
)
from tinytf.tasks.text import MAX_TEXT_BYTES
from tinytf.tasks.vocab import Vocabulary


def task_config(name, **keys):
    return TaskConfig(name=name, **keys)


def sample_strings(task, n=300, seed=0):
    """n examples as (source tokens, target tokens)."""
    pairs = task.sample(n, torch.Generator().manual_seed(seed))
    return [tuple(task.vocab.decode(ids) for ids in pairs.example(i)) for i in range(n)]


# ---- references, written the slow and obvious way


def ref_histogram(source):
    return [str(sum(other == token for other in source)) for token in source]


def ref_double_histogram(source):
    counts = {token: sum(other == token for other in source) for token in source}
    return [str(sum(1 for other in set(source) if counts[other] == counts[token])) for token in source]


def ref_most_freq(source):
    counts = Counter(source)
    first = {token: source.index(token) for token in counts}
    return sorted(counts, key=lambda token: (-counts[token], first[token]))


def ref_dyck(source):
    stack, broken, labels = [], False, []
    pairs = {")": "(", "]": "["}
    for token in source:
        if not broken:
            if token in "([":
                stack.append(token)
            elif token in pairs:
                if stack and stack[-1] == pairs[token]:
                    stack.pop()
                else:
                    broken = True
        labels.append("F" if broken else "T" if not stack else "P")
    return labels


def ref_add(source, answer_order):
    a, b = "".join(source).split("+")
    assert a == str(int(a)) and b == str(int(b)), "no leading zeros"
    total = str(int(a) + int(b))
    return list(total if answer_order == "msd" else total[::-1])


REFERENCES = {
    "copy": lambda source: list(source),
    "reverse": lambda source: list(reversed(source)),
    "sort": lambda source: sorted(source, key=int),
    "histogram": ref_histogram,
    "double-histogram": ref_double_histogram,
    "most-freq": ref_most_freq,
    "dyck-1": ref_dyck,
    "dyck-2": ref_dyck,
}


SYMBOL_TASKS = sorted(name for name, cls in TASKS.items() if issubclass(cls, SymbolTask))

# Registered tasks that are not symbol tasks, and the tests below that check them against
# their definition. A new task needs a reference above or a test of its own named here.
OWN_TESTS = {
    "add": "test_add_matches_integer_addition",
    "induction": "test_induction_repeats_a_random_sequence_once",
    "modular-add": "test_modular_add_lists_every_sum_modulo_p_once",
    "sentences": "test_sentences_verbs_agree_with_their_subject",
    "text": "test_text_task_cuts_training_and_held_out_windows_from_disjoint_regions",
}


def test_every_registered_task_is_checked_against_a_reference():
    assert set(REFERENCES) <= set(SYMBOL_TASKS), "a reference for a task that is not a registered symbol task"
    assert set(OWN_TESTS) == set(TASKS) - set(SYMBOL_TASKS), "a task that is neither a symbol task nor tested below"
    assert all(callable(globals().get(test)) for test in OWN_TESTS.values())


@pytest.mark.parametrize("name", SYMBOL_TASKS)
@pytest.mark.parametrize("vocab_size, min_len, max_len", [(10, 1, 12), (3, 5, 9), (20, 16, 16)])
def test_symbol_tasks_match_their_reference(name, vocab_size, min_len, max_len):
    assert name in REFERENCES, f"symbol task {name!r} has no brute-force reference: add one to REFERENCES"
    task = get_task(task_config(name, vocab_size=vocab_size, min_len=min_len, max_len=max_len))
    for source, target in sample_strings(task):
        assert min_len <= len(source) <= max_len
        assert target == REFERENCES[name](source), source


@pytest.mark.parametrize("answer_order", ["msd", "lsd"])
@pytest.mark.parametrize("digits", [1, 3, 6])
def test_add_matches_integer_addition(digits, answer_order):
    task = get_task(task_config("add", digits=digits, answer_order=answer_order))
    examples = sample_strings(task, n=500)
    for source, target in examples:
        assert target == ref_add(source, answer_order)
    numbers = [len("".join(source).split("+")[0]) for source, _ in examples]
    assert set(numbers) == set(range(1, digits + 1))  # every size of number occurs


@pytest.mark.parametrize("p", [2, 7, 31])
def test_modular_add_lists_every_sum_modulo_p_once(p):
    task = get_task(task_config("modular-add", modulus=p))
    table = task.table()
    examples = [
        tuple(map(int, [*task.render(s).split(), task.render(t)])) for s, t in map(table.example, range(len(table)))
    ]
    assert sorted(examples) == [(a, b, (a + b) % p) for a in range(p) for b in range(p)]
    assert task.vocab.decode(task.residue_ids().tolist()) == [str(n) for n in range(p)]


@pytest.mark.parametrize("name", ["dyck-1", "dyck-2"])
def test_dyck_labels_all_occur_often(name):
    task = get_task(task_config(name, min_len=8, max_len=24))
    labels = Counter(label for _, target in sample_strings(task, n=500) for label in target)
    total = sum(labels.values())
    for label in "TPF":
        assert labels[label] / total > 0.1, labels


@pytest.mark.parametrize("name", sorted(TASKS))
def test_sampling_is_determined_by_the_seed(name, tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("abcdefghij klmnop qrstu vwxyz " * 50)
    task = get_task(task_config(name, path=str(path)))
    assert sample_strings(task, 50, seed=3) == sample_strings(task, 50, seed=3)
    assert sample_strings(task, 50, seed=3) != sample_strings(task, 50, seed=4)


@pytest.mark.parametrize("name", sorted(TASKS))
def test_every_task_describes_itself(name):
    cls = TASKS[name]
    assert cls.name == name and cls.description and "\n" not in cls.description
    assert cls.archs and set(cls.archs) <= {"encoder", "decoder", "encoder-decoder"}


def test_sentences_vocabulary_and_lengths():
    task = get_task(task_config("sentences", min_len=3, max_len=12))
    assert task.vocab.encode("the cat sat on the mat")
    for _, target in sample_strings(task):
        assert target[0] == "<bos>" and target[-1] == "<eos>"
        assert 3 <= len(target) - 2 <= 12


@pytest.mark.parametrize(
    ("dropped", "listed"), [(("mat",), "('mat'): "), (("mat", "cat", "dog", "sat", "on"), "'sat'...): ")]
)
def test_a_vocabulary_from_an_older_grammar_is_one_line(dropped, listed):
    task = get_task(task_config("sentences"))
    task.vocab = Vocabulary([word for word in task.vocab.tokens if word not in dropped])
    with pytest.raises(UserError, match="lacks words of the sentences grammar") as raised:
        task.pool  # noqa: B018 (built on first use)
    assert listed in str(raised.value) and "train it again" in str(raised.value)


COPULA_FORMS = {number: [word] for number, word in COPULA.items()}


def test_sentences_verbs_agree_with_their_subject():
    grammar = Grammar(random.Random(0), max_depth=0)  # no clauses inside the subject
    number_of = {noun: number for number in ("sg", "pl") for noun in NOUNS[number]}
    verb_number = {
        verb: number
        for table in (INTRANSITIVE, TRANSITIVE, COPULA_FORMS)
        for number in ("sg", "pl")
        for verb in table[number]
    }
    past = set(INTRANSITIVE["past"]) | set(TRANSITIVE["past"])
    checked = 0
    for _ in range(500):
        words = grammar.sentence()
        subject = next(word for word in words if word in number_of)
        verb = next(word for word in words if word in verb_number or word in past)
        if verb in verb_number:
            assert verb_number[verb] == number_of[subject], words
            checked += 1
    assert checked > 100


def test_text_task_cuts_training_and_held_out_windows_from_disjoint_regions(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text(" ".join(f"w{i}" for i in range(3000)))  # every word says where it is
    task = get_task(task_config("text", path=str(path), max_len=8, tokenizer="word"))
    assert len(task.vocab) == 4 + 3000
    train = task.sample(500, torch.Generator().manual_seed(0))
    held_out = task.held_out(500, torch.Generator().manual_seed(0))
    split = int(3000 * 0.9)

    def word_positions(pairs, i):
        return [int(word[1:]) for word in task.vocab.decode(pairs.example(i)[1])]

    for i in range(500):
        train_window, held_out_window = word_positions(train, i), word_positions(held_out, i)
        assert len(train_window) == 9 and train_window == list(range(train_window[0], train_window[0] + 9))
        assert max(train_window) < split <= min(held_out_window)


def test_text_task_char_vocabulary_includes_spaces(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("ab ba " * 100)
    task = get_task(task_config("text", path=str(path), max_len=8))
    assert task.vocab.tokens[4:] == [" ", "a", "b"]
    assert task.vocab.encode("a b") == [task.vocab.ids["a"], task.vocab.ids[" "], task.vocab.ids["b"]]


def test_text_task_word_tokenizer(tmp_path):
    path = tmp_path / "words.txt"
    path.write_text("one two three four five six seven eight nine ten\n" * 30)
    task = get_task(task_config("text", path=str(path), max_len=4, tokenizer="word"))
    assert task.vocab.encode("three four") == [task.vocab.ids["three"], task.vocab.ids["four"]]


@pytest.mark.parametrize(
    "text, fragment",
    [
        (None, "corpus.txt: cannot read: text file not found"),
        ("tiny", "has 4 char tokens"),
        (b"\xff\xfe", "not UTF-8"),
    ],
)
def test_text_task_errors(tmp_path, text, fragment):
    path = tmp_path / "corpus.txt"
    if isinstance(text, bytes):
        path.write_bytes(text)
    elif text is not None:
        path.write_text(text)
    task = get_task(task_config("text", path=str(path)))
    with pytest.raises(ConfigError, match=fragment):
        task.sample(1, torch.Generator())


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_text_task_refuses_to_read_a_fifo(tmp_path):
    """Reading the data (not only the config check) refuses a FIFO instead of waiting for a writer."""
    fifo = tmp_path / "corpus.txt"
    os.mkfifo(fifo)
    task = get_task(task_config("text", path=str(fifo)))
    expected = f"task.path: {fifo}: cannot read: not a regular file (a FIFO); text file must be a regular file"
    with unblocked_after(20, lambda: open(fifo, "wb").close()):  # a hang becomes a failure
        for read in (lambda: task.sample(1, torch.Generator()), task.data_fingerprint):
            with pytest.raises(ConfigError) as caught:
                read()
            assert str(caught.value) == expected


def test_text_task_file_size_is_bounded(tmp_path):
    big = tmp_path / "big.txt"
    with open(big, "wb") as file:
        file.truncate(MAX_TEXT_BYTES + 1)  # sparse: no time or disk to make
    task = get_task(task_config("text", path=str(big)))
    bound = f"{MAX_TEXT_BYTES + 1:,} bytes; text file takes at most {MAX_TEXT_BYTES:,} bytes"
    with pytest.raises(ConfigProblem, match=bound):  # checked with the config, before any training
        task.check()
    with pytest.raises(ConfigError, match=bound):
        task.sample(1, torch.Generator())


@pytest.mark.parametrize("vocab_size, min_len, max_len", [(10, 2, 12), (3, 5, 9), (64, 16, 16)])
def test_induction_repeats_a_random_sequence_once(vocab_size, min_len, max_len):
    task = get_task(task_config("induction", vocab_size=vocab_size, min_len=min_len, max_len=max_len))
    lengths = set()
    for source, target in sample_strings(task):
        assert source == [] and target[0] == "<bos>" and "<eos>" not in target
        length = (len(target) - 1) // 2
        assert len(target) == 2 * length + 1 and min_len <= length <= max_len
        first, repeat = target[1 : length + 1], target[length + 1 :]
        assert first == repeat and set(first) <= {str(s) for s in range(vocab_size)}
        lengths.add(length)
    assert lengths == set(range(min_len, max_len + 1))  # every length occurs
    pairs = task.sample(300, torch.Generator().manual_seed(0))
    assert pairs.target.size(1) == task.max_target_len == 2 * max_len + 1


def test_induction_scores_the_repeat_from_its_second_token():
    task = get_task(task_config("induction", vocab_size=8, min_len=2, max_len=9))
    pairs = task.sample(200, torch.Generator().manual_seed(1))
    batch = get_framing(task, "decoder").frame(pairs)
    given = task.given_lengths(pairs)
    for i in range(len(pairs)):
        sequence = pairs.example(i)[1]  # <bos> x1..xL x1..xL
        length = (len(sequence) - 1) // 2
        assert sequence[1 : length + 1] == sequence[length + 1 :]  # a sequence, then the same again
        assert int(given[i]) == length + 2  # <bos>, the first copy, the repeat's first token
        labels = batch.labels[i].tolist()
        # Position j reads token j and predicts token j + 1: repeat token k (1-based) is
        # token L + k, predicted at position L + k - 1; scored for k = 2..L only.
        scored = {j: sequence[j + 1] for j in range(length + 1, 2 * length)}
        assert {j: label for j, label in enumerate(labels) if label != IGNORE} == scored
        assert batch.tokens[i, : 2 * length].tolist() == sequence[:-1]


def test_induction_sampling_is_seeded():
    task = get_task(task_config("induction", vocab_size=20, min_len=3, max_len=10))
    first, again = (task.sample(64, torch.Generator().manual_seed(5)) for _ in range(2))
    assert torch.equal(first.target, again.target) and torch.equal(first.target_len, again.target_len)
    other = task.sample(64, torch.Generator().manual_seed(6))
    assert not torch.equal(first.target, other.target)


@pytest.mark.parametrize("vocab_size, min_len, max_len", [(2, 2, 2), (3, 4, 4), (64, 6, 16), (10, 30, 40)])
def test_induction_showcase_is_a_repeat_the_model_can_read(vocab_size, min_len, max_len):
    """Its symbols exist at this vocab_size, and with <bos> it fits the shortest model.max_len
    the config check allows (the showcase's attention maps are logged while training)."""
    config = check_config(
        config_from_dict(
            {
                "task": {"name": "induction", "vocab_size": vocab_size, "min_len": min_len, "max_len": max_len},
                "model": {"arch": "decoder", "d_model": 16, "n_heads": 2, "d_ff": 0, "max_len": 2 * max_len},
            }
        )
    )
    task = get_task(config.task)
    tokens = task.showcase.split()
    first = tokens[: min(max(5, min_len), max_len)]
    assert tokens == (first + first)[: task.trained_lengths[1]] and len(tokens) > len(first)
    batch, _ = get_framing(task, "decoder").typed_batch(build_model(config), task.showcase)
    assert batch.tokens.tolist() == [[task.vocab.bos_id, *task.vocab.encode(tokens)]]


@pytest.mark.parametrize(
    "keys, fragment, blamed",
    [
        ({"min_len": 9, "max_len": 4}, "greater than task.max_len", "task.min_len"),
        ({"min_len": 1, "max_len": 4}, "at least 2 symbols", "task.min_len"),
        ({"min_len": 4, "max_len": 2048}, "4097 tokens", "task.max_len"),
    ],
)
def test_induction_check_refuses_lengths_it_cannot_use(keys, fragment, blamed):
    task = get_task(task_config("induction", **keys))
    with pytest.raises(ConfigProblem, match=fragment) as caught:
        task.check()
    assert blamed in caught.value.keys
    get_task(task_config("induction", min_len=2, max_len=2047)).check()  # the longest that fits


@pytest.mark.parametrize("construction", ["subject", "coreference", "semantic"])
def test_minimal_pairs_differ_in_the_word_the_answer_reads(construction):
    task = get_task(task_config("sentences"))
    for pair in minimal_pairs(construction, 200, seed=0):
        clean, corrupt = pair.clean.split(), pair.corrupt.split()
        assert len(clean) == len(corrupt) and pair.answer != pair.wrong
        (differs,) = [i for i, (a, b) in enumerate(zip(clean, corrupt, strict=True)) if a != b]
        for prompt, answer in ((clean, pair.answer), (corrupt, pair.wrong)):
            tokens = ["<bos>", *prompt, answer, "<eos>"]  # a sentence of the grammar, each word one token
            assert task.vocab.decode(task.vocab.encode(tokens)) == tokens
            # the answer, at len(prompt) + 1 after <bos>, reads the word that differs
            assert (len(prompt) + 1, differs + 1) in task.alignments([], task.vocab.encode(tokens))[construction]
    assert len({len(pair.clean.split()) for pair in minimal_pairs(construction, 50)}) == 1  # patchable by position
    assert minimal_pairs(construction, 5, seed=1) == minimal_pairs(construction, 5, seed=1)
    assert minimal_pairs(construction, 5, seed=1) != minimal_pairs(construction, 5, seed=2)


def test_the_sentences_hold_each_construction_and_tasks_shows_one_of_each():
    task = get_task(task_config("sentences"))
    found = {pattern: 0 for pattern in task.alignment_patterns}
    for i in range(2000):
        for pattern, pairs in task.alignments(*task.pool.example(i)).items():
            found[pattern] += bool(pairs)
    assert min(found.values()) > 300, found
    shown = TASKS["sentences"].example().split("  |  ")
    assert len(shown) == 3 and " . " in shown[0] and (" not " in shown[1] or " so " in shown[1])


@pytest.fixture(scope="module")
def sentence_beginnings():
    """The sentences task and every beginning of its training sentences, decoded by hand."""
    task = get_task(task_config("sentences", min_len=3, max_len=12))
    beginnings = set()
    for i in range(len(task.pool)):
        words = task.vocab.decode(task.pool.example(i)[1])[1:-1]
        beginnings |= {" ".join(words[:k]) for k in range(1, len(words) + 1)}
    return task, beginnings


@pytest.mark.parametrize("construction", ["subject", "coreference", "semantic"])
def test_held_out_pairs_begin_no_training_sentence(construction, sentence_beginnings):
    task, beginnings = sentence_beginnings
    pairs = task.held_out_pairs(construction, 300, seed=0)
    assert len(pairs) == 300 and len(set(pairs)) > 150
    for pair in pairs:
        assert f"{pair.clean} {pair.answer}" not in beginnings
        assert f"{pair.corrupt} {pair.wrong}" not in beginnings


def test_semantic_training_sentences_leave_each_nouns_held_out_adjectives_to_the_pairs():
    task = get_task(task_config("sentences"))
    first_adjectives = {}  # noun -> the first adjectives training gives it
    for i in range(len(task.pool)):
        words = task.vocab.decode(task.pool.example(i)[1])
        if "," in words:
            noun = next(word for word in words if word in NOUN_INDEX)
            first_adjectives.setdefault(noun, set()).add(words[words.index(",") - 1])
    for noun, seen in first_adjectives.items():
        assert not seen & set(held_out_adjectives(noun)) and len(seen) == 10 - HELD_OUT_ADJECTIVES
    assert len(first_adjectives) == 20


def test_minimal_pairs_say_so_when_training_has_seen_them_all():
    everything = {
        (determiner, noun, COPULA[number], first, ",", link, SEMANTIC[link][first])
        for number in ("sg", "pl")
        for determiner in DETERMINERS[number]
        for noun in NOUNS[number]
        for first in ANTONYMS
        for link in SEMANTIC
    }
    with pytest.raises(UserError, match="too few semantic pairs are unseen in training: found 0 of 10"):
        minimal_pairs("semantic", 10, seed=0, seen=everything)
