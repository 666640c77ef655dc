-- 0007: an escrow's public history names who took each step by role, not by organization
-- id: every step is taken by the funding organization, whose id no reader needs. Steps
-- written before this migration named that organization's id.
UPDATE escrow_history SET actor = 'funder' WHERE actor LIKE 'org\_%' ESCAPE '\';
