"""Where a wrong answer was lost, read from the evidence a run kept: each place on one question, then a whole
evaluation directory written as an evaluation writes it."""

from pathlib import Path

import pytest

from flows.bench import failures
from flows.bench.failures import FailuresError, locate, locate_one
from flows.evaluate import JUDGED_EVAL_SCHEMA, RESULTS_SCHEMA, run_unit, unit_key
from flows.systems import SystemOptions
from infra.models import clear_backend_cache
from infra.runtime.storage import ResultStore
from tasks.contracts import JudgedStep, Plan, Result, ResultStatus, Verdict
from tests.scripted import answer, plan, scripted_settings

BALK = {"id": "hotpotqa-1", "benchmark": "hotpotqa", "answer_type": "text", "answer": "Nelson Rockefeller",
        "question": "Alfred Balk served as the secretary of a committee under which Vice President?"}


def _search_step(step_id: int, text: str, accepted: bool = True) -> JudgedStep:
    p = Plan(step_id=step_id, sub_goal="find it", tool="search", args={"query": "Alfred Balk"})
    r = Result(step_id=step_id, tool="search", status=ResultStatus.ok,
               data={"passages": [{"doc_id": f"d{step_id}", "title": "Alfred Balk", "text": text}]})
    return JudgedStep(step_id=step_id, plan=p, result=r, verdict=Verdict(step_id=step_id, accepted=accepted))


def test_each_place_on_the_path_from_evidence_to_answer():
    born = _search_step(1, "Alfred Balk (July 24, 1930 - November 25, 2010) was an American reporter.")
    inside = _search_step(2, "He served as secretary of the Nelson Rockefeller Committee on Minorities.")
    alone = _search_step(3, "He later worked for Nelson Rockefeller, then Vice President.")
    assert locate_one(BALK, True, []) == "correct"
    assert failures._gold_docs({**BALK, "gold_doc_ids": ["d1", "d9"]}, [born, inside]) == \
        {"gold_docs_found": 1, "gold_docs_needed": 2}
    assert locate_one(BALK, False, []) == "no_evidence"
    assert locate_one(BALK, False, [born]) == "gold_not_in_evidence"
    # the gold is in the text, but the name run swallows it: "Nelson Rockefeller Committee"
    assert locate_one(BALK, False, [born, inside]) == "gold_not_offered"
    assert locate_one(BALK, False, [born, inside, alone]) == "wrong_pick"  # "Nelson Rockefeller" was a span
    assert locate_one(BALK, False, [born, inside], span_mode=False) == "wrong_pick"  # free mode: nothing to offer
    # an alias counts, and containment is whole tokens after normalising ("Rockefellers" is not "Rockefeller")
    assert locate_one({**BALK, "answer": "Rocky", "aliases": ["Nelson Aldrich Rockefeller"]}, False,
                      [_search_step(4, "He met Nelson Aldrich Rockefeller in 1970.")]) == "wrong_pick"
    assert not failures.contains("The Rockefellers' committee", "Rockefeller")
    # a question without an answer has no gold to trace: answering it at all is the error
    assert locate_one({**BALK, "answer": "uncertain", "expected_status": "uncertain"}, False, [born]) == "unanswerable"


KM = {"id": "gsm8k-0001", "benchmark": "gsm8k", "answer_type": "number", "answer": "120",
      "question": "Ann runs 27 km on Monday, twice as far on Tuesday, and 15 km less than Tuesday on Wednesday. "
                  "How many km does she run in total?"}
SIX = {"id": "gsm8k-0002", "benchmark": "gsm8k", "answer_type": "number", "answer": "42",
       "question": "What is 6 times 7?"}


def _unit(out: Path, record: dict, code: str, final: str, system: str = "modular"):
    clear_backend_cache()
    s = scripted_settings([plan("python", code, sub_goal="compute it"), plan("answer", final)], [answer(final, 1)])
    result = run_unit(system, 0, record, s, run_id="r", log=None, options=SystemOptions(prefect_tasks=False))
    store = ResultStore(str(out))
    unit = unit_key(system, 0, record["id"])
    store.write_part("parts/judged", unit, result.judged, JUDGED_EVAL_SCHEMA)
    store.write_part("parts/results", unit, [result.row], RESULTS_SCHEMA)


def test_an_evaluation_directory_is_located_question_by_question(tmp_path, capsys):
    out = tmp_path / "eval"
    _unit(out, KM, "print(27 + 2 * 15 - 15)", "42")   # the program never printed 120
    _unit(out, SIX, "print(6 * 7)", "42")              # right
    _unit(out, KM, "print(27 + 27 * 2 + (27 * 2 - 15))", "39", system="modular-nomem")  # printed 120, answered 39
    got = locate(out)
    assert got["modular"]["places"] == {"gold_not_in_evidence": 1, "correct": 1}
    places = {k: q["place"] for k, q in got["modular"]["questions"].items()}
    assert places == {"0:gsm8k-0001": "gold_not_in_evidence", "0:gsm8k-0002": "correct"}
    assert got["modular"]["questions"]["0:gsm8k-0001"]["accepted"] == 1  # answered after its one program
    assert got["modular"]["evidence_lost"] == {"questions": 1, "after_one_accepted_step": 1, "after_one_judged_step": 1,
                                               "naming_gold_documents": 0, "some_gold_document_missing": 0}
    assert got["modular-nomem"]["places"] == {"wrong_pick": 1}
    assert locate(out, ["modular-nomem"]).keys() == {"modular-nomem"}
    assert failures.main([str(out), "--json", str(tmp_path / "f.json")]) == 0
    text = capsys.readouterr().out
    assert "| modular | 2 | 1 | 1 |" in text and (tmp_path / "f.json").is_file()
    assert "modular: of 1 whose gold never reached the evidence, 1 were answered after one accepted step" in text
    assert "gold documents" not in text  # GSM8K names none


def test_what_is_not_an_evaluation_is_refused(tmp_path, capsys):
    with pytest.raises(FailuresError, match="not an evaluation directory"):
        locate(tmp_path)
    assert failures.main([str(tmp_path)]) == 2
    assert "not an evaluation directory" in capsys.readouterr().err
