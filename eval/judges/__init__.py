"""Judges: one ask → parse → validate → re-ask loop (:mod:`.base`) under the VIKR checklist
judge (:mod:`.checklist`), the DrivelHub+ rubric (:mod:`.rubric`), the 1–5 reference rubric
(:mod:`.reference_rubric`) and the merge of two judges (:mod:`.merge`)."""
