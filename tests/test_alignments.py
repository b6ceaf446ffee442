"""Alignment patterns: each task's (answer token, source token) pairs on hand-made examples,
and each framing's placement of them, checked against the batch that `frame` builds."""

import random

import pytest
import torch

import tinytf
from tinytf.config import TaskConfig
from tinytf.data.batch import IGNORE, single_pair
from tinytf.data.framing import get_framing
from tinytf.tasks import TASKS, get_task
from tinytf.tasks.sentences import ADJECTIVES, DETERMINERS, NOUNS, PREPOSITIONS, TRANSITIVE, Grammar


def make_task(name, **keys):
    return get_task(TaskConfig(name=name, **keys))


def pairs_of(name, source, target, **keys):
    """The task's pairs for typed source and target text, by pattern."""
    task = make_task(name, **keys)
    return task.alignments(task.vocab.encode(source), task.vocab.encode(target))


# ---- tasks, by hand


def test_copy_reads_the_same_position():
    assert pairs_of("copy", "3 1 2", "3 1 2") == {"copy": [(0, 0), (1, 1), (2, 2)]}


def test_an_answer_of_another_length_gives_pairs_for_the_tokens_both_have():
    assert pairs_of("copy", "3 1 2", "3 1") == {"copy": [(0, 0), (1, 1)]}
    assert pairs_of("copy", "3 1", "3 1 2 2") == {"copy": [(0, 0), (1, 1)]}
    assert pairs_of("reverse", "3 1 2", "2") == {"reverse": [(0, 2)]}


def test_reverse_reads_the_mirrored_position():
    assert pairs_of("reverse", "3 1 2 0", "0 2 1 3") == {"reverse": [(0, 3), (1, 2), (2, 1), (3, 0)]}


def test_sort_reads_every_position_holding_the_jth_smallest_value():
    # 3 1 2 1 -> 1 1 2 3: both 1s qualify for answers 0 and 1
    assert pairs_of("sort", "3 1 2 1", "1 1 2 3") == {"sort": [(0, 1), (0, 3), (1, 1), (1, 3), (2, 2), (3, 0)]}
    assert pairs_of("sort", "2 0 1", "0 1 2") == {"sort": [(0, 1), (1, 2), (2, 0)]}


def test_sort_follows_the_correct_order_not_the_answer_given():
    # A wrong answer still aligns answer j with the j-th smallest source value.
    assert pairs_of("sort", "2 0 1", "2 2 2") == {"sort": [(0, 1), (1, 2), (2, 0)]}


def test_histogram_reads_every_occurrence_of_the_positions_symbol():
    # c a c b -> 2 1 2 1
    expected = [(0, 0), (0, 2), (1, 1), (2, 0), (2, 2), (3, 3)]
    assert pairs_of("histogram", "c a c b", "2 1 2 1") == {"histogram": expected}


def test_the_sum_modulo_p_reads_both_operands():
    assert pairs_of("modular-add", "5 7", "12") == {"operands": [(0, 0), (0, 1)]}
    assert pairs_of("modular-add", "5 7", "") == {"operands": []}  # no answer token: nothing reads


def test_double_histogram_declares_no_pattern():
    assert make_task("double-histogram").alignment_patterns == ()
    assert pairs_of("double-histogram", "c a c b", "1 2 1 2") == {}


def subjects(text):
    """(verb, subject) index pairs of typed text framed as the pool frames it: <bos> words <eos>."""
    task = make_task("sentences")
    tokens = ["<bos>", *text.split(), "<eos>"]
    pairs = task.alignments([], task.vocab.encode(tokens))["subject"]
    return [(tokens[v], v, tokens[s], s) for v, s in pairs]


def test_a_main_verb_reads_the_first_noun():
    assert subjects("the cats sleep") == [("sleep", 3, "cats", 2)]
    assert subjects("a big dog chases the cats") == [("chases", 4, "dog", 3)]


def test_a_relative_clause_verb_reads_the_noun_before_that():
    assert subjects("the cat that sees the dog sleeps") == [("sees", 4, "cat", 2), ("sleeps", 7, "cat", 2)]
    assert subjects("the big dog chases a cat that runs under the tree") == [
        ("chases", 4, "dog", 3),
        ("runs", 8, "cat", 6),
    ]


def test_a_prepositional_phrase_does_not_move_the_subject():
    assert subjects("the dog near the cats runs") == [("runs", 6, "dog", 2)]
    assert subjects("the cat near the dogs that sleep sits") == [("sleep", 7, "dogs", 5), ("sits", 8, "cat", 2)]


def test_words_off_the_grammar_give_no_pair():
    assert subjects("sleeps the cat") == []  # no noun before the verb
    assert subjects("the that runs") == []  # "that" after a word that is no noun
    assert subjects("the") == []


def test_each_sentence_has_its_own_subject_and_padding_is_skipped():
    task = make_task("sentences")
    tokens = ["<bos>", "the", "cat", "sleeps", "<eos>", "the", "dogs", "<pad>", "run"]
    assert task.alignments([], task.vocab.encode(tokens)) == {
        "subject": [(3, 2), (8, 6)],
        "coreference": [],
        "semantic": [],
    }


def patterns(text):
    """Every pattern's (word, index, word it reads, index) pairs of typed text framed as the pool frames it."""
    task = make_task("sentences")
    tokens = ["<bos>", *text.split(), "<eos>"]
    found = task.alignments([], task.vocab.encode(tokens))
    return {pattern: [(tokens[q], q, tokens[k], k) for q, k in pairs] for pattern, pairs in found.items()}


def test_a_pronoun_reads_the_subject_of_the_clause_before_it():
    found = patterns("the dogs that see the cat slept . they run")
    assert found["coreference"] == [("they", 9, "dogs", 2)]
    assert found["subject"] == [("see", 4, "dogs", 2), ("slept", 7, "dogs", 2), ("run", 10, "they", 9)]
    assert patterns("they run")["coreference"] == []  # no clause before it


def test_the_second_adjective_reads_the_first():
    found = patterns("the cats near the dog are happy , so glad")
    assert found["semantic"] == [("glad", 10, "happy", 7)] and found["subject"] == [("are", 6, "cats", 2)]
    assert patterns("the cat is big , not small")["semantic"] == [("small", 7, "big", 4)]
    assert patterns("the cat is red , not small")["semantic"] == []  # red has no antonym in the grammar


def reference_subjects(words):
    """(verb index, subject index) of every verb of one sentence of the grammar, by parsing it:
    S -> NP VP (. Pronoun VP) | NP Copula Adj , Link Adj; NP -> Det (Adj) Noun (PP | that VP);
    VP -> Verb (NP) (PP); PP -> Prep NP."""
    determiners = {word for words in DETERMINERS.values() for word in words}
    nouns = {word for words in NOUNS.values() for word in words}
    transitive = {word for words in TRANSITIVE.values() for word in words}
    found, position = [], 0

    def next_word():
        return words[position] if position < len(words) else None

    def noun_phrase():  # -> the index of its head noun
        nonlocal position
        assert next_word() in determiners
        position += 1
        if next_word() in ADJECTIVES:
            position += 1
        head = position
        assert next_word() in nouns
        position += 1
        if next_word() in PREPOSITIONS:
            prepositional_phrase()
        elif next_word() == "that":
            position += 1
            verb_phrase(subject=head)
        return head

    def verb_phrase(subject):
        nonlocal position
        found.append((position, subject))
        position += 1
        if words[position - 1] in transitive:
            noun_phrase()
        if next_word() in PREPOSITIONS:
            prepositional_phrase()

    def prepositional_phrase():
        nonlocal position
        position += 1
        noun_phrase()

    subject = noun_phrase()
    if next_word() in ("is", "are"):  # NP Copula Adj , (not | so) Adj'
        found.append((position, subject))
        position += 5
    else:
        verb_phrase(subject)
    if next_word() == ".":  # . Pronoun VP
        position += 1
        pronoun = position
        position += 1
        verb_phrase(pronoun)
    assert position == len(words), words
    return found


def test_subjects_agree_with_a_parse_of_grammar_sentences():
    task = make_task("sentences")
    grammar = Grammar(random.Random(0))
    for _ in range(500):
        words = grammar.sentence()
        expected = [(verb + 1, subject + 1) for verb, subject in reference_subjects(words)]  # +1: <bos>
        assert task.alignments([], task.vocab.encode(["<bos>", *words, "<eos>"]))["subject"] == expected, words


@pytest.mark.parametrize("name", [name for name in TASKS if name != "text"])  # text needs a file to sample
def test_alignments_return_exactly_the_declared_patterns(name):
    task = make_task(name, min_len=3, max_len=6)
    source, target = task.sample(1, torch.Generator().manual_seed(0)).example(0)
    assert set(task.alignments(source, target)) == set(task.alignment_patterns)


# ---- framings: where the pairs lie in the attention maps

ATTENTION = {  # framing -> the attention map that reads the answer and the source
    "encoder": ("encoder", "self"),
    "decoder": ("decoder", "self"),
    "encoder-decoder": ("decoder", "cross"),
    "language-model": ("decoder", "self"),
}


@pytest.mark.parametrize(
    ("arch", "bos", "expected"),
    [
        ("encoder", False, ((0, 2), (1, 1), (2, 0))),
        ("encoder", True, ((1, 3), (2, 2), (3, 1))),  # <bos> at 0 shifts queries and keys
        ("decoder", False, ((3, 2), (4, 1), (5, 0))),  # 3 1 2 <sep> 2 1: <sep> (3) predicts answer 0
        ("decoder", True, ((4, 3), (5, 2), (6, 1))),  # <bos> 3 1 2 <sep> 2 1: <sep> (4) predicts answer 0
        ("encoder-decoder", False, ((0, 2), (1, 1), (2, 0))),  # <bos> 2 1 over the source 3 1 2
        ("encoder-decoder", True, ((0, 3), (1, 2), (2, 1))),  # <bos> 2 1 over the source <bos> 3 1 2
    ],
)
def test_each_framing_places_reverse_pairs(arch, bos, expected):
    task = make_task("reverse", bos=bos)
    source, target = task.vocab.encode("3 1 2"), task.vocab.encode("2 1 3")
    alignment = get_framing(task, arch).alignments(source, target, 10, 10)["reverse"]
    assert (alignment.stack, alignment.kind, alignment.pairs) == (*ATTENTION[arch], expected)


def test_the_language_model_framing_places_a_pair_at_the_token_before():
    task = make_task("sentences")
    target = task.vocab.encode(["<bos>", "the", "cats", "sleep", "<eos>"])
    alignment = get_framing(task, "decoder").alignments([], target, 4, 4)["subject"]
    # "sleep" (3) is predicted at position 2, where the model reads "cats" (2)
    assert (alignment.stack, alignment.kind, alignment.pairs) == ("decoder", "self", ((2, 2),))


def test_pairs_outside_the_attention_maps_are_dropped():
    task = make_task("copy")
    source = target = task.vocab.encode("3 1 2")
    decoder = get_framing(task, "decoder")
    assert decoder.alignments(source, target, 6, 6)["copy"].pairs == ((3, 0), (4, 1), (5, 2))
    assert decoder.alignments(source, target, 5, 5)["copy"].pairs == ((3, 0), (4, 1))  # answer cut at max_len
    cross = get_framing(task, "encoder-decoder")
    assert cross.alignments(source, target, 4, 2)["copy"].pairs == ((0, 0), (1, 1))  # keys: 2 source positions
    assert cross.alignments(source, target, 0, 3)["copy"].pairs == ()  # the pattern stays, empty


ALIGNED = [name for name, task in TASKS.items() if task.alignment_patterns]
FRAMED = [
    (name, arch, bos)
    for name in ALIGNED
    for arch in TASKS[name].archs
    for bos in ((False, True) if "bos" in TASKS[name].config_keys else (False,))
]


def small_task(name, bos=False):
    """A small config of any task: lengths 3..8 (words, for sentences), 3 symbols (many repeats)."""
    task = make_task(name, vocab_size=3, min_len=3, max_len=8, bos=bos)
    task.check()
    return task


def test_some_tasks_declare_alignment_patterns():
    assert {"copy", "reverse", "sort", "histogram", "sentences"} <= set(ALIGNED)


@pytest.mark.parametrize(("name", "arch", "bos"), FRAMED)
def test_every_pair_lands_on_its_answer_token_and_source_token(name, arch, bos):
    """Frame each example alone; at every placed (q, k), the label at q must be answer token j
    and the token at k source token i, for the task's own pair (j, i)."""
    task = small_task(name, bos)
    framing = get_framing(task, arch)
    stack, kind = framing.alignment_attention
    assert (stack, kind) == ATTENTION[framing.name]
    pairs = task.sample(20, torch.Generator().manual_seed(0))
    checked = 0
    for n in range(len(pairs)):
        source, target = pairs.example(n)
        one = single_pair(source, target)
        batch = framing.frame(one)
        keys = batch.source[0] if kind == "cross" else batch.tokens[0]  # (T_k,)
        read = target if task.language_model else source  # what i indexes
        given_lengths = task.given_lengths(one) if task.language_model else None
        given = 0 if given_lengths is None else int(given_lengths[0])  # tokens whose prediction is not scored
        expected = task.alignments(source, target)
        placed = framing.alignments(source, target, batch.tokens.size(1), keys.size(0))
        unbounded = framing.alignments(source, target, 10**6, 10**6)  # no query can take every key
        assert set(placed) == set(expected) == set(task.alignment_patterns)
        for pattern, alignment in placed.items():
            assert (alignment.stack, alignment.kind) == (stack, kind)
            every_pair = unbounded[pattern].pairs
            assert len(every_pair) == len(expected[pattern])  # a whole example: no pair outside the map
            keys_of = {q: {k for query, k in every_pair if query == q} for q, _ in every_pair}
            kept = {q: {k for query, k in alignment.pairs if query == q} for q, _ in alignment.pairs}
            assert all(kept[q] == keys_of[q] for q in kept)  # a query is kept whole, or left out
            assert all(keys_of[q] == set(range(keys.size(0))) for q in keys_of.keys() - kept.keys())
            for (q, k), (j, i) in zip(every_pair, expected[pattern], strict=True):
                label = int(batch.labels[0, q])
                assert label == target[j] or (label == IGNORE and j < given), (pattern, source, target, q, j)
                assert int(keys[k]) == read[i], (pattern, source, target, k, i)
                checked += 1
    assert checked > 0


@pytest.mark.parametrize(
    ("name", "arch"), [("sort", "encoder"), ("sort", "decoder"), ("sort", "encoder-decoder"), ("sentences", "decoder")]
)
def test_the_placed_pairs_index_the_models_attention_map_of_that_name(name, arch):
    task = small_task(name)
    framing = get_framing(task, arch)
    torch.manual_seed(0)
    config = {
        "task": {"name": name, "min_len": 3, "max_len": 8},
        "model": {"arch": arch, "d_model": 16, "n_heads": 2, "n_layers": 1, "d_ff": 16, "max_len": 32},
    }
    if name == "sort":
        config["task"]["vocab_size"] = 3
    model = tinytf.build_model(config).eval()
    source, target = task.sample(1, torch.Generator().manual_seed(1)).example(0)
    batch = framing.frame(single_pair(source, target))
    stack, kind = framing.alignment_attention
    with torch.no_grad():
        _, attention = model(**batch.model_inputs(), return_attention=True)
    query_len, key_len = attention[f"{stack}.0.{kind}"].shape[-2:]  # (B, H, T_q, T_k)
    assert query_len == batch.tokens.size(1)
    assert key_len == (batch.source.size(1) if kind == "cross" else batch.tokens.size(1))
    placed = framing.alignments(source, target, query_len, key_len)
    assert placed == framing.alignments(source, target, 10**6, 10**6)  # every pair lies inside the map
    assert any(alignment.pairs for alignment in placed.values())  # (a sentence shows some of its patterns)


def test_a_query_whose_pattern_takes_every_key_is_left_out():
    # Any head puts all its attention on a pattern that holds every key it can see: no score.
    add = make_task("modular-add", modulus=7)
    source, target = add.vocab.encode("3 5"), add.vocab.encode("1")
    assert get_framing(add, "encoder").alignments(source, target, 2, 2)["operands"].pairs == ()  # a reads a, b
    assert get_framing(add, "decoder").alignments(source, target, 4, 4)["operands"].pairs == ((2, 0), (2, 1))
    histogram = make_task("histogram", vocab_size=3, min_len=3, max_len=3)
    encoder = get_framing(histogram, "encoder")
    same, mixed = histogram.vocab.encode("1 1 1"), histogram.vocab.encode("1 2 1")
    counts = [0, 0, 0]  # the pattern reads the source; the target only says how many answers
    assert encoder.alignments(same, counts, 3, 3)["histogram"].pairs == ()
    assert set(encoder.alignments(mixed, counts, 3, 3)["histogram"].pairs) == {(0, 0), (0, 2), (1, 1), (2, 0), (2, 2)}
